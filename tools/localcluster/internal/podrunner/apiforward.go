package podrunner

import (
	"context"
	"io"
	"log"
	"net"
	"sync"
	"time"
)

// forwardAPI relays TCP connections from the pod network to the apiserver. The apiserver
// listens on loopback only (so nothing outside this machine can reach it, and a
// kubeconfig used after `down` goes nowhere); pods reach it at the gateway address on the
// kubernetes service's port, as through kube-proxy. TLS passes through untouched.
func forwardAPI(ctx context.Context, listen []string, target string) error {
	var listeners []net.Listener
	for _, addr := range listen {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range listeners {
				l.Close()
			}
			return err
		}
		listeners = append(listeners, ln)
	}
	for _, ln := range listeners {
		go func() {
			<-ctx.Done()
			ln.Close()
		}()
		go acceptLoop(ln, target)
	}
	return nil
}

func acceptLoop(ln net.Listener, target string) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go relay(conn, target)
	}
}

func relay(client net.Conn, target string) {
	defer client.Close()
	server, err := net.DialTimeout("tcp", target, 5*time.Second)
	if err != nil {
		log.Printf("apiserver forward: %v", err)
		return
	}
	defer server.Close()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		// Pass the half-close on, so the other direction can finish.
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
	}
	wg.Add(2)
	go pipe(server, client)
	go pipe(client, server)
	wg.Wait()
}
