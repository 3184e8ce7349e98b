package cluster

import (
	"strconv"
	"strings"
	"time"
)

// components lists the cluster's processes in start order, the addons' last.
func components(l Layout, s Settings) []component {
	all := coreComponents(l, s)
	if s.has(AddonCoscheduling) {
		all = append(all, coschedulerComponent(l))
	}
	return all
}

func coreComponents(l Layout, s Settings) []component {
	gw, _ := s.Gateway()
	gateway := gw.Addr().String()
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(s.EtcdPort)
	pki := l.PKIFile
	// Pods reach the apiserver on the gateway at the kubernetes service's port and at the
	// port its endpoints name.
	forward := gateway + ":" + strconv.Itoa(PodAPIPort)
	if s.APIPort != PodAPIPort {
		forward += "," + gateway + ":" + strconv.Itoa(s.APIPort)
	}
	return []component{
		{
			name:   "etcd",
			binary: l.Binary("cohort-etcd"),
			args: []string{"--data-dir", l.Etcd, "--listen-client", etcdURL,
				"--listen-peer", "http://127.0.0.1:" + strconv.Itoa(s.EtcdPort+10)},
		},
		{
			name:   "kube-apiserver",
			binary: l.Binary("kube-apiserver"),
			args: append([]string{
				// Loopback only: nothing outside this machine reaches it, and the pod
				// runner forwards the pod network's gateway address to it.
				"--bind-address=127.0.0.1",
				"--advertise-address=" + gateway,
				"--secure-port=" + strconv.Itoa(s.APIPort),
				"--etcd-servers=" + etcdURL,
				"--service-cluster-ip-range=" + s.ServiceCIDR,
				"--client-ca-file=" + pki("ca.crt"),
				"--tls-cert-file=" + pki("apiserver.crt"),
				"--tls-private-key-file=" + pki("apiserver.key"),
				"--kubelet-client-certificate=" + pki("apiserver-kubelet-client.crt"),
				"--kubelet-client-key=" + pki("apiserver-kubelet-client.key"),
				"--kubelet-preferred-address-types=InternalIP",
				"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
				"--service-account-key-file=" + pki("sa.pub"),
				"--service-account-signing-key-file=" + pki("sa.key"),
				"--authorization-mode=Node,RBAC",
				"--allow-privileged=true",
				"--cert-dir=" + l.PKIFile("apiserver-generated"),
				"--profiling=false",
				"--v=0",
			}, s.GenericWorkloadFlags(true)...),
		},
		{
			name:   "kube-controller-manager",
			binary: l.Binary("kube-controller-manager"),
			args: append([]string{
				"--kubeconfig=" + l.ComponentKubeconfig("controller-manager"),
				"--leader-elect=false",
				// Each controller acts as its own service account, under RBAC.
				"--use-service-account-credentials=true",
				"--service-account-private-key-file=" + pki("sa.key"),
				"--root-ca-file=" + pki("ca.crt"),
				"--cluster-signing-cert-file=" + pki("ca.crt"),
				"--cluster-signing-key-file=" + pki("ca.key"),
				"--service-cluster-ip-range=" + s.ServiceCIDR,
				"--secure-port=0",
				"--v=0",
			}, s.GenericWorkloadFlags(false)...),
		},
		{
			// The real scheduler, default profile: it places every pod (the pod runner
			// only runs what is bound to its nodes), with CPU, memory and nvidia.com/gpu
			// counted against what each node advertises; with GenericWorkload, gangs of
			// pods in a scheduling.k8s.io PodGroup all or none (its GangScheduling plugin).
			name:   "kube-scheduler",
			binary: l.Binary("kube-scheduler"),
			args: append([]string{
				"--kubeconfig=" + l.ComponentKubeconfig("scheduler"),
				"--leader-elect=false",
				"--secure-port=0",
				"--v=0",
			}, s.GenericWorkloadFlags(false)...),
		},
		{
			name:   "pod-runner",
			binary: l.Binary("cohort-pod-runner"),
			args: []string{
				"--kubeconfig=" + l.ComponentKubeconfig("pod-runner"),
				"--node-name=" + s.NodeName,
				"--node-ip=" + gateway,
				"--pod-cidr=" + s.PodCIDR,
				"--bridge=" + s.Bridge,
				"--api-host=" + gateway,
				"--api-port=" + strconv.Itoa(PodAPIPort),
				"--api-forward=" + forward,
				"--api-server=127.0.0.1:" + strconv.Itoa(s.APIPort),
				"--state-dir=" + l.Pods,
				"--log-dir=" + l.PodLogs,
				"--volume-dir=" + l.Volumes,
				"--mountpoint-log=" + l.MountpointLog(),
				"--bin-dir=" + l.CohortBin,
				"--init-binary=" + l.Binary("cohort-container-init"),
				"--path-prepend=" + s.PathPrepend,
				"--python=" + s.Python,
				"--kubelet-port=" + strconv.Itoa(s.KubeletPort),
				"--tls-cert=" + pki("node.crt"),
				"--tls-key=" + pki("node.key"),
				"--client-ca=" + pki("ca.crt"),
				"--shutdown-grace=" + (5 * time.Second).String(),
				"--cpu=" + s.NodeCPU,
				"--memory=" + s.NodeMemory,
				"--gpus=" + strconv.Itoa(s.NodeGPUs),
				"--pods=" + strconv.Itoa(s.NodePodsOrDefault()),
				"--spare-nodes=" + strings.Join(s.SpareNodeNames(), ","),
				"--fake-nvml=" + s.FakeNVML,
			},
		},
	}
}

// stopGrace is how long each component gets to stop; the runner first stops every pod.
func stopGrace(name string) time.Duration {
	if name == "pod-runner" {
		return 45 * time.Second
	}
	return 15 * time.Second
}
