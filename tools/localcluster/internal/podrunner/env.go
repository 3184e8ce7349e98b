package podrunner

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// environment is a container's environment in definition order; later definitions win,
// as in Kubernetes.
type environment struct {
	names  []string
	values map[string]string
}

func newEnvironment() *environment { return &environment{values: map[string]string{}} }

func (e *environment) set(name, value string) {
	if _, ok := e.values[name]; !ok {
		e.names = append(e.names, name)
	}
	e.values[name] = value
}

func (e *environment) lookup(name string) (string, bool) {
	v, ok := e.values[name]
	return v, ok
}

func envList(e *environment) []string {
	out := make([]string, 0, len(e.names))
	for _, n := range e.names {
		out = append(out, n+"="+e.values[n])
	}
	return out
}

// containerEnv builds what a container sees: a base environment (PATH, HOME, HOSTNAME, the
// in-cluster apiserver address and, with a fake NVML, its variables), then envFrom, then
// env with $(VAR) references expanded. The runner's own environment is not passed on.
func (r *Runner) containerEnv(ctx context.Context, pod *v1.Pod, c *v1.Container, sb *sandbox) (*environment, error) {
	env := newEnvironment()
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	prefix := append(append([]string{}, r.cfg.PathPrepend...), r.cfg.BinDir)
	env.set("PATH", strings.Join(append(prefix, path), ":"))
	env.set("HOME", homeDir())
	env.set("HOSTNAME", sb.hostname)
	if sb.sharedTmp {
		// The host's /tmp stays visible (see sandbox.sharedTmp): a directory of its own.
		tmp, err := sb.tmpDir(c)
		if err != nil {
			return nil, err
		}
		env.set("TMPDIR", tmp)
	}
	if lang := os.Getenv("LANG"); lang != "" {
		env.set("LANG", lang)
	}
	apiPort := strconv.Itoa(r.cfg.APIPort)
	env.set("KUBERNETES_SERVICE_HOST", r.cfg.APIHost)
	env.set("KUBERNETES_SERVICE_PORT", apiPort)
	env.set("KUBERNETES_SERVICE_PORT_HTTPS", apiPort)
	env.set("KUBERNETES_PORT", "tcp://"+r.cfg.APIHost+":"+apiPort)
	r.setFakeNVMLEnv(env, pod, sb)

	for _, from := range c.EnvFrom {
		if err := r.addEnvFrom(ctx, pod.Namespace, from, env); err != nil {
			return nil, err
		}
	}
	for _, ev := range c.Env {
		if ev.ValueFrom == nil {
			env.set(ev.Name, expand(ev.Value, env.lookup))
			continue
		}
		value, ok, err := r.envValueFrom(ctx, pod, c, sb, ev.ValueFrom)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", ev.Name, err)
		}
		if ok {
			env.set(ev.Name, value)
		}
	}
	return env, nil
}

func (r *Runner) addEnvFrom(ctx context.Context, namespace string, from v1.EnvFromSource, env *environment) error {
	var data map[string]string
	switch {
	case from.ConfigMapRef != nil:
		cm, err := r.client.CoreV1().ConfigMaps(namespace).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			if isOptional(from.ConfigMapRef.Optional) {
				return nil
			}
			return fmt.Errorf("envFrom configmap %s: %w", from.ConfigMapRef.Name, err)
		}
		data = cm.Data
	case from.SecretRef != nil:
		s, err := r.client.CoreV1().Secrets(namespace).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
		if err != nil {
			if isOptional(from.SecretRef.Optional) {
				return nil
			}
			return fmt.Errorf("envFrom secret %s: %w", from.SecretRef.Name, err)
		}
		data = map[string]string{}
		for k, v := range s.Data {
			data[k] = string(v)
		}
	}
	for _, k := range sortedKeys(data) {
		env.set(from.Prefix+k, data[k])
	}
	return nil
}

// envValueFrom resolves valueFrom; ok is false for a missing optional key.
func (r *Runner) envValueFrom(ctx context.Context, pod *v1.Pod, c *v1.Container, sb *sandbox, from *v1.EnvVarSource) (string, bool, error) {
	switch {
	case from.FieldRef != nil:
		v, err := fieldValue(pod, sb, from.FieldRef.FieldPath)
		return v, err == nil, err
	case from.ResourceFieldRef != nil:
		v, err := r.resourceValue(pod, c, from.ResourceFieldRef)
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		cm, err := r.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return "", false, optionalMiss(ref.Optional, fmt.Errorf("configmap %s: %w", ref.Name, err))
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			return "", false, optionalMiss(ref.Optional, fmt.Errorf("configmap %s has no key %s", ref.Name, ref.Key))
		}
		return v, true, nil
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		s, err := r.client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return "", false, optionalMiss(ref.Optional, fmt.Errorf("secret %s: %w", ref.Name, err))
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			return "", false, optionalMiss(ref.Optional, fmt.Errorf("secret %s has no key %s", ref.Name, ref.Key))
		}
		return string(v), true, nil
	}
	return "", false, fmt.Errorf("unsupported valueFrom")
}

func isOptional(optional *bool) bool { return optional != nil && *optional }

func optionalMiss(optional *bool, err error) error {
	if isOptional(optional) {
		return nil
	}
	return err
}

func homeDir() string {
	if h := os.Getenv("HOME"); h != "" {
		return h
	}
	return "/root"
}

// expand replaces $(NAME) with NAME's value when NAME is defined, leaves it as written
// otherwise, and turns $$ into $: Kubernetes' rules for env values, command and args.
func expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			ref := s[i : i+3+end]
			if v, ok := lookup(s[i+2 : i+2+end]); ok {
				b.WriteString(v)
			} else {
				b.WriteString(ref)
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func expandAll(args []string, env *environment) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expand(a, env.lookup)
	}
	return out
}
