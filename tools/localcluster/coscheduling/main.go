// cohort-coscheduler is kube-scheduler v1.32 with one out-of-tree plugin registered:
// Coscheduling from sigs.k8s.io/scheduler-plugins v0.32.7, the gang scheduling of pods
// that name a scheduling.x-k8s.io PodGroup. `local-cluster up --addons coscheduling` runs it
// as a second scheduler beside the cluster's own; see tools/README.md.
//
// Its own module: scheduler-plugins v0.32 is built against Kubernetes v1.32, while the
// rest of the local cluster is v1.37. Only Coscheduling is registered (not the upstream
// scheduler binary's dozen plugins) to keep the build and its dependencies small.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	// The scheme that decodes CoschedulingArgs in a KubeSchedulerConfiguration.
	_ "sigs.k8s.io/scheduler-plugins/apis/config/scheme"
	"sigs.k8s.io/scheduler-plugins/pkg/coscheduling"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(coscheduling.Name, coscheduling.New))
	os.Exit(cli.Run(command))
}
