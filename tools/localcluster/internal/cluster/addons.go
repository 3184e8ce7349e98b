package cluster

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

// Addons the cluster can run besides its core (`up --addons a,b`).
const (
	// AddonKueue installs Kueue's API: its CRDs, written from Kueue's published API types
	// (addons/kueue.yaml). Kueue's controller is not available here (the Go module proxy
	// refuses sigs.k8s.io/kueue): tests play its part on the Workloads' status.
	AddonKueue = "kueue"
	// AddonCoscheduling runs cohort-coscheduler (kube-scheduler with scheduler-plugins'
	// Coscheduling plugin) as a second scheduler, CoschedulerName, with the PodGroup CRD.
	AddonCoscheduling = "coscheduling"
)

// CoschedulerName is the schedulerName of the coscheduling scheduler's profile.
const CoschedulerName = "scheduler-plugins-scheduler"

var knownAddons = []string{AddonKueue, AddonCoscheduling}

//go:embed addons/kueue.yaml
var kueueManifest []byte

//go:embed addons/coscheduling-rbac.yaml
var coschedulingRBAC []byte

// ParseAddons reads a comma-separated list of addons; unknown names are an error.
func ParseAddons(list string) ([]string, error) {
	var addons []string
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if !slices.Contains(knownAddons, name) {
			return nil, fmt.Errorf("unknown addon %q (known: %s)", name, strings.Join(knownAddons, ", "))
		}
		if !slices.Contains(addons, name) {
			addons = append(addons, name)
		}
	}
	slices.Sort(addons)
	return addons, nil
}

func (s Settings) has(addon string) bool { return slices.Contains(s.Addons, addon) }

// coschedulerConfig is the KubeSchedulerConfiguration of cohort-coscheduler: one profile,
// CoschedulerName, with the Coscheduling plugin at every extension point it implements and
// as the only queue sort (a profile's queue sort must be its scheduler's only one), as
// scheduler-plugins' own example configures it.
func coschedulerConfig(l Layout) string {
	return `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: ` + l.ComponentKubeconfig("coscheduler") + `
profiles:
- schedulerName: ` + CoschedulerName + `
  plugins:
    multiPoint:
      enabled:
      - name: Coscheduling
    queueSort:
      enabled:
      - name: Coscheduling
      disabled:
      - name: "*"
  pluginConfig:
  - name: Coscheduling
    args:
      permitWaitingTimeSeconds: 30
      podGroupBackoffSeconds: 1
`
}

// coschedulerComponent is the second scheduler's process.
func coschedulerComponent(l Layout) component {
	return component{
		name:   "coscheduler",
		binary: l.Binary("cohort-coscheduler"),
		args: []string{
			"--config=" + filepath.Join(l.Run, "coscheduler-config.yaml"),
			"--secure-port=0",
			"--v=0",
		},
	}
}

// podGroupCRD is scheduler-plugins' own PodGroup CRD, which tools/local-cluster copies from
// the module it builds cohort-coscheduler from.
func (l Layout) podGroupCRD() string {
	return filepath.Join(l.ToolsBin, "..", "share", "coscheduling", "podgroups.yaml")
}

// applyAddons installs the API objects of s.Addons and starts their processes that are
// not running. Safe to repeat: what is there already is left as it is.
func applyAddons(l Layout, s Settings, out io.Writer) error {
	if len(s.Addons) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, err := newApplier(l)
	if err != nil {
		return err
	}
	if s.has(AddonKueue) {
		if err := a.apply(ctx, kueueManifest, "addons/kueue.yaml"); err != nil {
			return fmt.Errorf("addon kueue: %w", err)
		}
		fmt.Fprintln(out, "local-cluster: addon kueue: Kueue's API installed (no controller: tests play Kueue)")
	}
	if s.has(AddonCoscheduling) {
		crd, err := os.ReadFile(l.podGroupCRD())
		if err != nil {
			return fmt.Errorf("addon coscheduling: %w (tools/local-cluster up --addons coscheduling builds it)", err)
		}
		if err := a.apply(ctx, crd, l.podGroupCRD()); err != nil {
			return fmt.Errorf("addon coscheduling: %w", err)
		}
		if err := a.apply(ctx, coschedulingRBAC, "addons/coscheduling-rbac.yaml"); err != nil {
			return fmt.Errorf("addon coscheduling: %w", err)
		}
		if err := os.WriteFile(filepath.Join(l.Run, "coscheduler-config.yaml"), []byte(coschedulerConfig(l)), 0o644); err != nil {
			return err
		}
		c := coschedulerComponent(l)
		if _, running := l.runningPID(c); !running {
			fmt.Fprintf(out, "local-cluster: starting %s (log %s)\n", c.name, l.LogFile(c.name))
			if _, err := l.start(c); err != nil {
				return err
			}
			// Started means its informers can fail later; give it a moment to show a bad
			// configuration, which it reports by exiting.
			time.Sleep(2 * time.Second)
			if _, alive := l.runningPID(c); !alive {
				return fmt.Errorf("%s exited; last lines of %s:\n%s", c.name, l.LogFile(c.name), tail(l.LogFile(c.name), 30))
			}
		}
		fmt.Fprintf(out, "local-cluster: addon coscheduling: pods with schedulerName %s are gang-scheduled by PodGroup\n", CoschedulerName)
	}
	return nil
}

// applier server-side applies YAML manifests with the admin identity.
type applier struct {
	client dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(l Layout) (*applier, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		return nil, err
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &applier{client: client, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))}, nil
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// apply applies every document of manifest (field manager local-cluster), then waits until
// the CRDs among them are Established.
func (a *applier) apply(ctx context.Context, manifest []byte, source string) error {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var crds []string
	for {
		var obj unstructured.Unstructured
		if err := decoder.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("%s: %w", source, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s: %s %s: %w", source, gvk.Kind, obj.GetName(), err)
		}
		data, err := obj.MarshalJSON()
		if err != nil {
			return err
		}
		resource := a.client.Resource(mapping.Resource)
		var target dynamic.ResourceInterface = resource
		if ns := obj.GetNamespace(); ns != "" {
			target = resource.Namespace(ns)
		}
		if _, err := target.Patch(ctx, obj.GetName(), types.ApplyPatchType, data,
			metav1.PatchOptions{FieldManager: "local-cluster", Force: ptr.To(true)}); err != nil {
			return fmt.Errorf("%s: apply %s %s: %w", source, gvk.Kind, obj.GetName(), err)
		}
		if mapping.Resource == crdGVR {
			crds = append(crds, obj.GetName())
		}
	}
	for _, name := range crds {
		if err := a.waitEstablished(ctx, name); err != nil {
			return err
		}
	}
	if len(crds) > 0 {
		a.mapper.Reset()
	}
	return nil
}

func (a *applier) waitEstablished(ctx context.Context, name string) error {
	for {
		crd, err := a.client.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conditions {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRD %s not established: %v", name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
