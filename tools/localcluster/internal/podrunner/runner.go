package podrunner

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"cohort.dev/tools/localcluster/internal/hostnet"
)

// resyncPeriod replays every pod to the handlers, so an unschedulable pod is reconsidered
// after the node changes.
const resyncPeriod = 30 * time.Second

// Runner owns the nodes: it watches pods and services and keeps one podWorker per pod
// bound to one of its nodes (Config.Nodes).
type Runner struct {
	cfg      Config
	client   kubernetes.Interface
	pods     corelisters.PodLister
	services corelisters.ServiceLister
	bridge   hostnet.Bridge
	pool     *hostnet.AddressPool
	hosts    *hostsWriter
	events   *nodeEvents
	// provisioner makes volumes for claims; nil without Config.VolumeDir.
	provisioner *provisioner

	mu      sync.Mutex
	workers map[types.UID]*podWorker
	// stopping is set once the runner shuts down, so no new worker starts.
	stopping bool
	wg       sync.WaitGroup
}

// New prepares a runner; Run starts it.
func New(cfg Config, client kubernetes.Interface) *Runner {
	r := &Runner{
		cfg:     cfg,
		client:  client,
		bridge:  hostnet.Bridge{Name: cfg.Bridge, Gateway: netip.PrefixFrom(cfg.NodeIP, cfg.PodCIDR.Bits())},
		pool:    hostnet.NewAddressPool(cfg.PodCIDR, cfg.NodeIP),
		workers: map[types.UID]*podWorker{},
	}
	r.events = newNodeEvents(client, cfg.Nodes())
	if cfg.VolumeDir != "" {
		r.provisioner = &provisioner{client: client, dir: cfg.VolumeDir}
	}
	return r
}

// Run serves until ctx ends, then stops every pod's processes and removes their network
// namespaces. The pod objects stay, so the next run starts them again.
func (r *Runner) Run(ctx context.Context) error {
	removeLeftovers(r.cfg)
	if err := r.bridge.Ensure(); err != nil {
		return err
	}
	if err := forwardAPI(ctx, r.cfg.APIForward, r.cfg.APIServer); err != nil {
		return fmt.Errorf("apiserver forward: %w", err)
	}
	if err := writeFakeNVMLConfigs(r.cfg); err != nil {
		return fmt.Errorf("fake NVML: %w", err)
	}
	if err := removeStaleSpareNodes(ctx, r.client, r.cfg); err != nil {
		return fmt.Errorf("spare nodes: %w", err)
	}
	for _, node := range nodeAgents(r.client, r.cfg) {
		if err := node.register(ctx); err != nil {
			return fmt.Errorf("register node %s: %w", node.name, err)
		}
		go node.heartbeat(ctx)
	}

	factory := informers.NewSharedInformerFactory(r.client, resyncPeriod)
	podInformer := factory.Core().V1().Pods()
	serviceInformer := factory.Core().V1().Services()
	r.pods = podInformer.Lister()
	r.services = serviceInformer.Lister()
	r.hosts = newHostsWriter(r)

	if _, err := podInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.podChanged(obj) },
		UpdateFunc: func(_, obj any) { r.podChanged(obj) },
		DeleteFunc: r.podRemoved,
	}); err != nil {
		return err
	}
	if _, err := serviceInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.hosts.changed() },
		UpdateFunc: func(any, any) { r.hosts.changed() },
		DeleteFunc: func(any) { r.hosts.changed() },
	}); err != nil {
		return err
	}
	if err := r.watchClaims(ctx, factory); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go r.hosts.run(ctx)
	if r.cfg.KubeletPort != 0 {
		go func() {
			if err := serveContainerLogs(ctx, r); err != nil {
				log.Printf("container log endpoint: %v", err)
			}
		}()
	}
	log.Printf("pod runner ready on node %s", strings.Join(r.cfg.Nodes(), ", "))

	<-ctx.Done()
	r.shutdown()
	return nil
}

// watchClaims provisions volumes for claims and releases them. The scheduler holds a pod
// whose claim is not bound yet and places it once the claim is bound.
func (r *Runner) watchClaims(ctx context.Context, factory informers.SharedInformerFactory) error {
	if r.provisioner == nil {
		return nil
	}
	claimChanged := func(obj any) {
		if pvc, ok := obj.(*v1.PersistentVolumeClaim); ok {
			if err := r.provisioner.claimChanged(ctx, pvc); err != nil {
				log.Printf("provision: %v", err)
			}
		}
	}
	if _, err := factory.Core().V1().PersistentVolumeClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    claimChanged,
		UpdateFunc: func(_, obj any) { claimChanged(obj) },
	}); err != nil {
		return err
	}
	volumeChanged := func(obj any) {
		if pv, ok := obj.(*v1.PersistentVolume); ok {
			if err := r.provisioner.volumeChanged(ctx, pv); err != nil {
				log.Printf("release: %v", err)
			}
		}
	}
	_, err := factory.Core().V1().PersistentVolumes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    volumeChanged,
		UpdateFunc: func(_, obj any) { volumeChanged(obj) },
	})
	return err
}

func (r *Runner) podChanged(obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	r.hosts.changed()
	if !r.cfg.serves(pod.Spec.NodeName) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.workers[pod.UID]; w != nil {
		w.update(pod)
		return
	}
	if r.stopping {
		return
	}
	w := newPodWorker(r, pod)
	r.workers[pod.UID] = w
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		w.run()
		r.mu.Lock()
		delete(r.workers, pod.UID)
		r.mu.Unlock()
	}()
}

func (r *Runner) podRemoved(obj any) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	r.hosts.changed()
	r.mu.Lock()
	w := r.workers[pod.UID]
	r.mu.Unlock()
	if w != nil {
		w.objectGone()
	}
}

// worker returns the worker of a pod, if it runs here.
func (r *Runner) worker(uid types.UID) *podWorker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.workers[uid]
}

// allWorkers is a snapshot for the hosts writer.
func (r *Runner) allWorkers() []*podWorker {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]*podWorker, 0, len(r.workers))
	for _, w := range r.workers {
		out = append(out, w)
	}
	return out
}

func (r *Runner) shutdown() {
	r.mu.Lock()
	r.stopping = true
	workers := make([]*podWorker, 0, len(r.workers))
	for _, w := range r.workers {
		workers = append(workers, w)
	}
	r.mu.Unlock()
	log.Printf("stopping %d pods", len(workers))
	for _, w := range workers {
		w.runnerStopping()
	}
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(r.cfg.ShutdownGrace + 10*time.Second):
		log.Printf("pods did not stop in time")
	}
}
