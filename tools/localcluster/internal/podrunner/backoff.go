package podrunner

import "time"

// restartBackoff is the CrashLoopBackOff delay. It starts lower than the kubelet's 10 s
// because tests restart containers on purpose and should not wait for it.
type restartBackoff struct {
	delay time.Duration
}

const (
	initialBackoff = 1 * time.Second
	maxBackoff     = 30 * time.Second
	// A container that ran this long is healthy again: its next crash starts over.
	backoffReset = 60 * time.Second
)

// next returns how long to wait before restarting a container that ran for ranFor.
func (b *restartBackoff) next(ranFor time.Duration) time.Duration {
	if ranFor >= backoffReset || b.delay == 0 {
		b.delay = initialBackoff
		return b.delay
	}
	b.delay = min(2*b.delay, maxBackoff)
	return b.delay
}
