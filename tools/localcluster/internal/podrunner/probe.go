package podrunner

import (
	"context"
	"fmt"
	"log"
	"time"

	v1 "k8s.io/api/core/v1"
)

// probeRun is the probing of one run of a container; stop ends it when the process ends.
type probeRun struct {
	cancel context.CancelFunc
}

func (p *probeRun) stop() { p.cancel() }

// startProbes runs the startup probe until it passes (marking the container started),
// then readiness and liveness probes side by side, as the kubelet does.
func startProbes(c *container, proc *process) *probeRun {
	ctx, cancel := context.WithCancel(c.w.ctx)
	go func() {
		if c.spec.StartupProbe != nil {
			passed := probeLoop(ctx, c, proc, c.spec.StartupProbe, func(ok, changed bool, streak int) bool {
				if ok {
					return true
				}
				if streak >= threshold(c.spec.StartupProbe.FailureThreshold, 3) {
					c.requestRestart("failed startup probe")
					return true
				}
				return false
			})
			if !passed {
				return
			}
		}
		c.markStarted(proc)
		if rp := c.spec.ReadinessProbe; rp != nil {
			go probeLoop(ctx, c, proc, rp, func(ok, _ bool, streak int) bool {
				switch {
				case ok && streak >= threshold(rp.SuccessThreshold, 1):
					c.setReady(proc, true)
				case !ok && streak >= threshold(rp.FailureThreshold, 3):
					c.setReady(proc, false)
				}
				return false
			})
		}
		if lp := c.spec.LivenessProbe; lp != nil {
			go probeLoop(ctx, c, proc, lp, func(ok, _ bool, streak int) bool {
				if !ok && streak >= threshold(lp.FailureThreshold, 3) {
					c.requestRestart("failed liveness probe")
					return true
				}
				return false
			})
		}
	}()
	return &probeRun{cancel: cancel}
}

// probeLoop probes every period after the initial delay and hands each result, with the
// length of the current run of equal results, to decide; decide returns true to stop.
// probeLoop reports whether the last result was a success.
func probeLoop(ctx context.Context, c *container, proc *process, probe *v1.Probe, decide func(ok, changed bool, streak int) bool) bool {
	period := seconds(probe.PeriodSeconds, 10)
	if !sleepCtx(ctx, time.Duration(probe.InitialDelaySeconds)*time.Second) {
		return false
	}
	streak, last := 0, false
	for {
		ok, message := runProbe(ctx, c, proc, probe)
		if ctx.Err() != nil {
			return false
		}
		changed := streak == 0 || ok != last
		if changed {
			streak = 0
		}
		streak++
		last = ok
		if !ok && streak == threshold(probe.FailureThreshold, 3) {
			why := fmt.Sprintf("container %s: probe failed %d times: %s", c.spec.Name, streak, message)
			c.w.r.events.Event(c.w.currentPod(), v1.EventTypeWarning, "Unhealthy", why)
			// In the runner's log too: the event is gone with the test's namespace.
			log.Printf("pod %s: %s", podKey(c.w.currentPod()), why)
		}
		if decide(ok, changed, streak) {
			return ok
		}
		if !sleepCtx(ctx, period) {
			return false
		}
	}
}

func threshold(v int32, def int) int {
	if v <= 0 {
		return def
	}
	return int(v)
}

func seconds(v int32, def int) time.Duration {
	if v <= 0 {
		return time.Duration(def) * time.Second
	}
	return time.Duration(v) * time.Second
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
