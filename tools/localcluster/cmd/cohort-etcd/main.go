// cohort-etcd runs a single-member etcd, embedded (go.etcd.io/etcd/server/v3/embed), for
// the local cluster's kube-apiserver. It listens on loopback only and trades durability
// for speed (no fsync): the cluster is a development and CI tool whose state can be
// thrown away.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "directory for etcd's data (required)")
	clientURL := flag.String("listen-client", "http://127.0.0.1:23790", "client URL (loopback)")
	peerURL := flag.String("listen-peer", "http://127.0.0.1:23800", "peer URL (loopback)")
	flag.Parse()
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "cohort-etcd: --data-dir is required")
		os.Exit(2)
	}
	cfg, err := config(*dataDir, *clientURL, *peerURL)
	if err != nil {
		log.Fatalf("cohort-etcd: %v", err)
	}
	server, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("cohort-etcd: start: %v", err)
	}
	select {
	case <-server.Server.ReadyNotify():
		log.Printf("cohort-etcd: ready on %s", *clientURL)
	case <-time.After(60 * time.Second):
		server.Close()
		log.Fatalf("cohort-etcd: not ready after 60s")
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case sig := <-stop:
		log.Printf("cohort-etcd: %v, stopping", sig)
		server.Close()
	case err := <-server.Err():
		log.Fatalf("cohort-etcd: %v", err)
	}
}

func config(dataDir, clientURL, peerURL string) (*embed.Config, error) {
	client, err := url.Parse(clientURL)
	if err != nil {
		return nil, fmt.Errorf("--listen-client: %w", err)
	}
	peer, err := url.Parse(peerURL)
	if err != nil {
		return nil, fmt.Errorf("--listen-peer: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "local"
	cfg.Dir = dataDir
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogOutputs = []string{"stderr"}
	cfg.LogLevel = "warn"
	cfg.UnsafeNoFsync = true
	// The apiserver compacts on its own; this only bounds history if it is down.
	cfg.AutoCompactionMode = embed.CompactorModePeriodic
	cfg.AutoCompactionRetention = "1h"
	return cfg, nil
}
