// local-cluster starts, stops and inspects the local Kubernetes cluster that cohort's
// end-to-end tests run on. Run it through tools/local-cluster, which builds it first; see
// tools/README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"cohort.dev/tools/localcluster/internal/cluster"
)

const usage = `usage: local-cluster --root REPO COMMAND
  up [--addons LIST]       start the cluster (or find it running); prints KUBECONFIG=PATH last
                           LIST: comma-separated, of kueue (Kueue's API, its CRDs) and
                           coscheduling (a second scheduler, scheduler-plugins-scheduler,
                           gang-scheduling by PodGroup); on a running cluster it adds them
  down                     stop everything up started; safe to repeat
  status                   what runs; exit status 0 only when the cluster is up
  logs NS/POD [CONTAINER]  a container's log (--previous: the run before; --path: only the path)
  nvml-fifo NS/POD         the pod's fake NVML control FIFO (with COHORT_LOCAL_FAKE_NVML at up)
  reset                    down, then delete the cluster's state (etcd data, certificates, logs)
`

func main() {
	root := flag.String("root", "", "repository root (required)")
	flag.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	flag.Parse()
	if *root == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	closeInheritedDescriptors()
	layout := cluster.NewLayout(*root)
	var err error
	switch cmd, args := flag.Arg(0), flag.Args()[1:]; cmd {
	case "up":
		fs := flag.NewFlagSet("up", flag.ContinueOnError)
		list := fs.String("addons", "", "comma-separated addons: kueue, coscheduling")
		if err = fs.Parse(args); err == nil && fs.NArg() > 0 {
			err = fmt.Errorf("up: unexpected argument %q", fs.Arg(0))
		}
		var addons []string
		if err == nil {
			addons, err = cluster.ParseAddons(*list)
		}
		if err == nil {
			err = cluster.Up(layout, addons, os.Stdout)
		}
	case "down":
		err = cluster.Down(layout, os.Stdout)
	case "reset":
		err = cluster.Reset(layout, os.Stdout)
	case "status":
		err = cluster.Status(layout, os.Stdout)
		if errors.Is(err, cluster.ErrNotUp) {
			fmt.Println("local-cluster: not up")
			os.Exit(1)
		}
	case "logs":
		err = logs(layout, args)
	case "nvml-fifo":
		if len(args) != 1 {
			err = fmt.Errorf("usage: nvml-fifo NS/POD")
		} else {
			err = cluster.NVMLControlFIFO(layout, args[0], os.Stdout)
		}
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "local-cluster: %v\n", err)
		os.Exit(1)
	}
}

// closeInheritedDescriptors marks every descriptor beyond stdin, stdout and stderr
// close-on-exec. Whatever ran us may have left some open (a build lock, a test harness's
// pipe); the cluster's long-lived processes must not keep them.
func closeInheritedDescriptors() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

func logs(layout cluster.Layout, args []string) error {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	previous := fs.Bool("previous", false, "the log of the run before the current one")
	pathOnly := fs.Bool("path", false, "print only the log file's path")
	// Flags may come before or after the pod and container.
	var positional []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return err
		}
		args = fs.Args()
		if len(args) > 0 {
			positional = append(positional, args[0])
			args = args[1:]
		}
	}
	if len(positional) < 1 || len(positional) > 2 {
		return fmt.Errorf("usage: logs NS/POD [CONTAINER] [--previous] [--path]")
	}
	req := cluster.LogsRequest{Pod: positional[0], Previous: *previous, PathOnly: *pathOnly}
	if len(positional) == 2 {
		req.Container = positional[1]
	}
	return cluster.Logs(layout, req, os.Stdout)
}
