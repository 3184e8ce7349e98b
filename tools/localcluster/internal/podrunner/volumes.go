package podrunner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// volumeFile is one file of a configMap, secret, downward API or projected volume.
type volumeFile struct {
	path string
	data []byte
	mode os.FileMode
}

// prepareVolumes creates every volume of the pod under the sandbox directory (hostPath and
// persistentVolumeClaim volumes excepted: they live where their volume is) and returns where
// each one is. Contents are written once, at pod
// start: later ConfigMap or Secret changes do not reach running pods.
func prepareVolumes(ctx context.Context, r *Runner, pod *v1.Pod, sb *sandbox) (map[string]string, error) {
	paths := map[string]string{}
	for _, vol := range pod.Spec.Volumes {
		dir := filepath.Join(sb.dir, "volumes", vol.Name)
		var files []volumeFile
		var err error
		switch {
		case vol.EmptyDir != nil:
		case vol.HostPath != nil:
			dir, err = hostPathVolume(vol.HostPath)
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
			}
			paths[vol.Name] = dir
			continue
		case vol.PersistentVolumeClaim != nil:
			dir, err = claimedVolume(ctx, r.client, pod.Namespace, vol.PersistentVolumeClaim)
			if err != nil {
				return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
			}
			paths[vol.Name] = dir
			continue
		case vol.ConfigMap != nil:
			files, err = r.configMapFiles(ctx, pod.Namespace, vol.ConfigMap.Name, vol.ConfigMap.Items,
				vol.ConfigMap.DefaultMode, vol.ConfigMap.Optional)
		case vol.Secret != nil:
			files, err = r.secretFiles(ctx, pod.Namespace, vol.Secret.SecretName, vol.Secret.Items,
				vol.Secret.DefaultMode, vol.Secret.Optional)
		case vol.DownwardAPI != nil:
			files, err = r.downwardFiles(pod, sb, vol.DownwardAPI.Items, vol.DownwardAPI.DefaultMode)
		case vol.Projected != nil:
			files, err = r.projectedFiles(ctx, pod, sb, vol.Projected)
		default:
			err = fmt.Errorf("this volume type is not supported by the local pod runner " +
				"(emptyDir, hostPath, persistentVolumeClaim, configMap, secret, downwardAPI and " +
				"projected are)")
		}
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
		}
		if err := writeVolume(dir, files); err != nil {
			return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
		}
		paths[vol.Name] = dir
	}
	return paths, nil
}

func hostPathVolume(hp *v1.HostPathVolumeSource) (string, error) {
	path := filepath.Clean(hp.Path)
	_, err := os.Stat(path)
	if err == nil {
		return path, nil
	}
	switch {
	case hp.Type != nil && *hp.Type == v1.HostPathDirectoryOrCreate:
		return path, os.MkdirAll(path, 0o755)
	case hp.Type != nil && *hp.Type == v1.HostPathFileOrCreate:
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return "", err
		}
		return path, os.WriteFile(path, nil, 0o644)
	}
	return "", fmt.Errorf("hostPath %s: %w", path, err)
}

func writeVolume(dir string, files []volumeFile) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	for _, f := range files {
		clean := filepath.Clean("/" + f.path)
		if clean == "/" || strings.Contains(f.path, "..") {
			return fmt.Errorf("bad file path %q", f.path)
		}
		target := filepath.Join(dir, clean)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(target, f.data, f.mode); err != nil {
			return err
		}
		if err := os.Chmod(target, f.mode); err != nil {
			return err
		}
	}
	return nil
}

func fileMode(item, defaultMode *int32) os.FileMode {
	switch {
	case item != nil:
		return os.FileMode(*item)
	case defaultMode != nil:
		return os.FileMode(*defaultMode)
	}
	return 0o644
}

// keyFiles turns a ConfigMap's or Secret's data into files: every key, or only items.
func keyFiles(kind, name string, data map[string][]byte, items []v1.KeyToPath, defaultMode *int32, optional *bool) ([]volumeFile, error) {
	var files []volumeFile
	if len(items) == 0 {
		for _, k := range sortedKeys(data) {
			files = append(files, volumeFile{path: k, data: data[k], mode: fileMode(nil, defaultMode)})
		}
		return files, nil
	}
	for _, item := range items {
		value, ok := data[item.Key]
		if !ok {
			if isOptional(optional) {
				continue
			}
			return nil, fmt.Errorf("%s %s has no key %s", kind, name, item.Key)
		}
		files = append(files, volumeFile{path: item.Path, data: value, mode: fileMode(item.Mode, defaultMode)})
	}
	return files, nil
}

func (r *Runner) configMapFiles(ctx context.Context, namespace, name string, items []v1.KeyToPath, defaultMode *int32, optional *bool) ([]volumeFile, error) {
	cm, err := r.client.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if isOptional(optional) {
			return nil, nil
		}
		return nil, fmt.Errorf("configmap %s: %w", name, err)
	}
	data := map[string][]byte{}
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return keyFiles("configmap", name, data, items, defaultMode, optional)
}

func (r *Runner) secretFiles(ctx context.Context, namespace, name string, items []v1.KeyToPath, defaultMode *int32, optional *bool) ([]volumeFile, error) {
	s, err := r.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		if isOptional(optional) {
			return nil, nil
		}
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	return keyFiles("secret", name, s.Data, items, defaultMode, optional)
}

func (r *Runner) downwardFiles(pod *v1.Pod, sb *sandbox, items []v1.DownwardAPIVolumeFile, defaultMode *int32) ([]volumeFile, error) {
	var files []volumeFile
	for _, item := range items {
		var value string
		var err error
		switch {
		case item.FieldRef != nil:
			value, err = fieldValue(pod, sb, item.FieldRef.FieldPath)
		case item.ResourceFieldRef != nil:
			value, err = r.resourceValue(pod, nil, item.ResourceFieldRef)
		}
		if err != nil {
			return nil, err
		}
		files = append(files, volumeFile{path: item.Path, data: []byte(value), mode: fileMode(item.Mode, defaultMode)})
	}
	return files, nil
}
