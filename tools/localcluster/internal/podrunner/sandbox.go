package podrunner

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"cohort.dev/tools/localcluster/internal/containerspec"
	"cohort.dev/tools/localcluster/internal/hostnet"
)

// sandbox is what a pod's containers share: the network namespace and address, volume
// directories, the hosts, resolv.conf and hostname files bound over /etc, and with
// shareProcessNamespace a PID namespace.
type sandbox struct {
	dir      string
	network  hostnet.PodNetwork
	podIP    netip.Addr
	hostIP   string
	hostname string
	volumes  map[string]string // volume name -> host directory
	// hostNetwork pods share the host's network namespace and address.
	hostNetwork bool
	// sharedTmp: the runner's own files (a checkout under /tmp) would be hidden by a /tmp
	// of the container's own, so containers see the host's /tmp and get TMPDIR instead.
	sharedTmp bool
	// pidNS is the pod's PID namespace; nil unless the pod has shareProcessNamespace.
	pidNS *podPIDNamespace

	mu             sync.Mutex
	lastHosts      []byte
	networkRemoved bool
}

func newSandbox(ctx context.Context, r *Runner, pod *v1.Pod) (*sandbox, error) {
	dir := filepath.Join(r.cfg.StateDir, string(pod.UID))
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		return nil, err
	}
	sb := &sandbox{
		dir:         dir,
		podIP:       r.cfg.NodeIP,
		hostIP:      r.cfg.NodeIP.String(),
		hostname:    podHostname(pod),
		hostNetwork: pod.Spec.HostNetwork,
		sharedTmp:   underTmp(r.cfg.StateDir) || underTmp(r.cfg.BinDir) || underTmp(r.cfg.InitBinary),
	}
	if err := r.makeNVMLControlFIFO(pod, sb); err != nil {
		return nil, err
	}
	if !sb.hostNetwork {
		addr, err := r.pool.Allocate(string(pod.UID))
		if err != nil {
			return nil, err
		}
		sb.network, sb.podIP = hostnet.NewPodNetwork(string(pod.UID), addr), addr.Addr()
	}
	var err error
	// Volumes first: a missing ConfigMap is retried without rebuilding the network.
	if sb.volumes, err = prepareVolumes(ctx, r, pod, sb); err != nil {
		return nil, err
	}
	if err := sb.writeEtcFiles(r, pod); err != nil {
		return nil, err
	}
	if !sb.hostNetwork {
		if err := sb.network.Create(r.bridge); err != nil {
			return nil, err
		}
	}
	if ptr.Deref(pod.Spec.ShareProcessNamespace, false) {
		if sb.pidNS, err = startPodPIDNamespace(r.cfg.InitBinary, filepath.Join(dir, pidNamespaceFile)); err != nil {
			if !sb.hostNetwork {
				_ = sb.network.Remove()
			}
			return nil, err
		}
	}
	return sb, nil
}

// pidNSPath is the PID namespace containers join; "" gives each its own.
func (sb *sandbox) pidNSPath() string {
	if sb.pidNS == nil {
		return ""
	}
	return sb.pidNS.path()
}

// netNSPath is the network namespace containers join; "" keeps the host's.
func (sb *sandbox) netNSPath() string {
	if sb.hostNetwork {
		return ""
	}
	return sb.network.Path()
}

// podHostname is spec.hostname or the pod name, cut to a DNS label.
func podHostname(pod *v1.Pod) string {
	name := pod.Spec.Hostname
	if name == "" {
		name = pod.Name
	}
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}

func (sb *sandbox) etcPath(name string) string { return filepath.Join(sb.dir, "etc", name) }

func (sb *sandbox) containerDir(name string) string {
	dir := filepath.Join(sb.dir, "containers", name)
	_ = os.MkdirAll(dir, 0o755)
	return dir
}

func (sb *sandbox) writeEtcFiles(r *Runner, pod *v1.Pod) error {
	// No DNS server is reachable from a pod; asking loopback fails fast instead of
	// waiting for timeouts, and every name the cluster knows is in the hosts file.
	resolv := fmt.Sprintf("search %s.svc.%s svc.%s %s\nnameserver 127.0.0.1\noptions ndots:5 timeout:1 attempts:1\n",
		pod.Namespace, clusterDomain, clusterDomain, clusterDomain)
	if err := os.WriteFile(sb.etcPath("resolv.conf"), []byte(resolv), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(sb.etcPath("hostname"), []byte(sb.hostname+"\n"), 0o644); err != nil {
		return err
	}
	return sb.writeHosts(r.hosts.render(pod, sb, r.hosts.records()))
}

// writeHosts rewrites the hosts file in place when its content changed. In place, because
// containers see it through a bind mount of this very inode.
func (sb *sandbox) writeHosts(content []byte) error {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	// Once the network is gone no process reads the file any more.
	if sb.networkRemoved || string(content) == string(sb.lastHosts) {
		return nil
	}
	// Rewritten in place (the file is bind-mounted, so a new file renamed over it would not
	// be seen), and never emptied first: a process resolving a name meanwhile (gloo resolves
	// the pod's own hostname as it starts) could find an empty file and fall back to the
	// DNS server that is not there. The first lines (localhost, the pod's own names) are the
	// same in every version, so a reader always finds them whole; the rest is cut to the new
	// length after the write.
	f, err := os.OpenFile(sb.etcPath("hosts"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteAt(content, 0); err != nil {
		return err
	}
	if err := f.Truncate(int64(len(content))); err != nil {
		return err
	}
	sb.lastHosts = content
	return nil
}

func underTmp(path string) bool {
	return path == "/tmp" || strings.HasPrefix(filepath.Clean(path), "/tmp/")
}

// tmpDir is the container's own temporary directory.
func (sb *sandbox) tmpDir(c *v1.Container) (string, error) {
	tmp := filepath.Join(sb.containerDir(c.Name), "tmp")
	if err := os.MkdirAll(tmp, 0o777); err != nil {
		return "", err
	}
	return tmp, os.Chmod(tmp, 0o777|os.ModeSticky)
}

// mountsFor lists a container's bind mounts: the pod's /etc files, a /tmp of its own (as
// an image would give it; pods must not meet in the host's /tmp) unless sharedTmp, then
// its volumeMounts.
func (sb *sandbox) mountsFor(c *v1.Container) ([]containerspec.Mount, error) {
	tmp, err := sb.tmpDir(c)
	if err != nil {
		return nil, err
	}
	mounts := []containerspec.Mount{
		{Source: sb.etcPath("hosts"), Target: "/etc/hosts"},
		{Source: sb.etcPath("resolv.conf"), Target: "/etc/resolv.conf"},
		{Source: sb.etcPath("hostname"), Target: "/etc/hostname"},
	}
	if !sb.sharedTmp {
		mounts = append(mounts, containerspec.Mount{Source: tmp, Target: "/tmp"})
	}
	for _, vm := range c.VolumeMounts {
		source, ok := sb.volumes[vm.Name]
		if !ok {
			return nil, fmt.Errorf("volumeMount %s: no volume of that name", vm.Name)
		}
		if vm.SubPathExpr != "" {
			return nil, fmt.Errorf("volumeMount %s: subPathExpr is not supported by the local pod runner", vm.Name)
		}
		if vm.SubPath != "" {
			source = filepath.Join(source, vm.SubPath)
			if _, err := os.Stat(source); os.IsNotExist(err) {
				if err := os.MkdirAll(source, 0o755); err != nil {
					return nil, err
				}
			}
		}
		mounts = append(mounts, containerspec.Mount{Source: source, Target: vm.MountPath, ReadOnly: vm.ReadOnly})
	}
	return mounts, nil
}

// stopProcesses ends the pod's shared PID namespace, if it has one, once its containers
// have stopped: anything they left in it ends with it.
func (sb *sandbox) stopProcesses() {
	if sb.pidNS != nil {
		sb.pidNS.stop()
	}
}

// removeNetwork deletes the network namespace once no process needs it.
func (sb *sandbox) removeNetwork() {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if !sb.networkRemoved && !sb.hostNetwork {
		_ = sb.network.Remove()
	}
	sb.networkRemoved = true
}

// remove deletes everything of the sandbox; container logs live elsewhere and stay.
func (sb *sandbox) remove() {
	sb.stopProcesses()
	sb.removeNetwork()
	sb.mu.Lock()
	defer sb.mu.Unlock()
	_ = os.RemoveAll(sb.dir)
}
