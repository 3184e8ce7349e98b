package podrunner

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

const clusterDomain = "cluster.local"

// hostsWriter is the cluster's DNS: there is no DNS server, so every pod's /etc/hosts
// lists the names of the services in the cluster, each resolving straight to the
// addresses of the ready pods behind it (no kube-proxy, no cluster IPs), and the
// hostname.subdomain names of pods under headless services. It rewrites the files
// whenever pods or services change.
type hostsWriter struct {
	r     *Runner
	dirty chan struct{}
}

// hostRecord is one name-to-address mapping. Relative names (svc, host.sub) resolve only
// inside their own namespace, as through the pod's DNS search path.
type hostRecord struct {
	namespace string
	ip        string
	relative  []string
	absolute  []string
}

func newHostsWriter(r *Runner) *hostsWriter {
	return &hostsWriter{r: r, dirty: make(chan struct{}, 1)}
}

func (h *hostsWriter) changed() {
	select {
	case h.dirty <- struct{}{}:
	default:
	}
}

func (h *hostsWriter) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.dirty:
		}
		// Let a burst of pod updates settle into one rewrite.
		time.Sleep(100 * time.Millisecond)
		records := h.records()
		for _, w := range h.r.allWorkers() {
			sb := w.currentSandbox()
			if sb == nil {
				continue
			}
			if err := sb.writeHosts(h.render(w.currentPod(), sb, records)); err != nil {
				log.Printf("hosts file of %s: %v", podKey(w.currentPod()), err)
			}
		}
	}
}

// render is the hosts file of one pod.
func (h *hostsWriter) render(pod *v1.Pod, sb *sandbox, records []hostRecord) []byte {
	var b bytes.Buffer
	b.WriteString("# Written by the cohort local pod runner: cluster names without a DNS server.\n")
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")
	own := []string{sb.hostname}
	if pod.Spec.Subdomain != "" {
		fqdn := fmt.Sprintf("%s.%s.%s.svc.%s", sb.hostname, pod.Spec.Subdomain, pod.Namespace, clusterDomain)
		own = []string{fqdn, sb.hostname}
	}
	fmt.Fprintf(&b, "%s\t%s\n", sb.podIP, strings.Join(own, " "))
	for _, rec := range records {
		names := rec.absolute
		if rec.namespace == pod.Namespace {
			names = append(append([]string{}, rec.relative...), rec.absolute...)
		}
		fmt.Fprintf(&b, "%s\t%s\n", rec.ip, strings.Join(names, " "))
	}
	return b.Bytes()
}

// records lists every service name with the pods that serve it, in a stable order so an
// unchanged cluster rewrites no file.
func (h *hostsWriter) records() []hostRecord {
	var out []hostRecord
	services, err := h.r.services.List(labels.Everything())
	if err != nil {
		return nil
	}
	sort.Slice(services, func(i, j int) bool {
		return services[i].Namespace+"/"+services[i].Name < services[j].Namespace+"/"+services[j].Name
	})
	for _, svc := range services {
		if svc.Namespace == v1.NamespaceDefault && svc.Name == "kubernetes" {
			out = append(out, serviceRecord(svc, h.r.cfg.APIHost))
			continue
		}
		if len(svc.Spec.Selector) == 0 {
			continue
		}
		pods, err := h.r.pods.Pods(svc.Namespace).List(labels.SelectorFromSet(svc.Spec.Selector))
		if err != nil {
			continue
		}
		sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
		for _, pod := range pods {
			if !serves(pod, svc) {
				continue
			}
			out = append(out, serviceRecord(svc, pod.Status.PodIP))
			if svc.Spec.ClusterIP == v1.ClusterIPNone && pod.Spec.Subdomain == svc.Name {
				host := podHostname(pod) + "." + svc.Name
				out = append(out, hostRecord{
					namespace: svc.Namespace, ip: pod.Status.PodIP,
					relative: []string{host},
					absolute: qualified(host, svc.Namespace),
				})
			}
		}
	}
	return out
}

func serviceRecord(svc *v1.Service, ip string) hostRecord {
	return hostRecord{namespace: svc.Namespace, ip: ip, relative: []string{svc.Name}, absolute: qualified(svc.Name, svc.Namespace)}
}

func qualified(name, namespace string) []string {
	n := name + "." + namespace
	return []string{n, n + ".svc", n + ".svc." + clusterDomain}
}

// serves says whether a pod is an endpoint of the service: it has an address, is not
// finished or terminating, and is ready (or the service publishes unready pods).
func serves(pod *v1.Pod, svc *v1.Service) bool {
	if pod.Status.PodIP == "" || pod.DeletionTimestamp != nil {
		return false
	}
	if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return false
	}
	if svc.Spec.PublishNotReadyAddresses {
		return true
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}
