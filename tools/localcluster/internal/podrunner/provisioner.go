package podrunner

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// provisionerName marks the volumes the provisioner made (the annotation external
// provisioners set), so that kube-controller-manager leaves their deletion to it.
const provisionerName = "cohort.dev/local-path"

// provisioner is the local cluster's storage, a small local-path provisioner: every
// PersistentVolumeClaim without a volume gets a hostPath PersistentVolume of its own, a
// directory under dir, made for it (its claimRef names the claim).
// kube-controller-manager's PersistentVolume controller then binds the two, as it does for
// any external provisioner's volumes. Once the claim is deleted, the released volume goes
// with its directory.
type provisioner struct {
	client kubernetes.Interface
	dir    string
}

// volumeName is the claim's volume: one per claim incarnation, like the real provisioners'.
func volumeName(pvc *v1.PersistentVolumeClaim) string { return "pvc-" + string(pvc.UID) }

// volumeFor is the PersistentVolume that serves pvc, under dir.
func volumeFor(pvc *v1.PersistentVolumeClaim, dir string) *v1.PersistentVolume {
	name := volumeName(pvc)
	size := pvc.Spec.Resources.Requests[v1.ResourceStorage]
	if size.IsZero() {
		size = resource.MustParse("1Gi")
	}
	modes := pvc.Spec.AccessModes
	if len(modes) == 0 {
		modes = []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce}
	}
	return &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": provisionerName},
		},
		Spec: v1.PersistentVolumeSpec{
			Capacity:                      v1.ResourceList{v1.ResourceStorage: size},
			AccessModes:                   modes,
			PersistentVolumeReclaimPolicy: v1.PersistentVolumeReclaimDelete,
			StorageClassName:              ptr.Deref(pvc.Spec.StorageClassName, ""),
			VolumeMode:                    ptr.To(v1.PersistentVolumeFilesystem),
			PersistentVolumeSource: v1.PersistentVolumeSource{HostPath: &v1.HostPathVolumeSource{
				Path: filepath.Join(dir, name+"_"+pvc.Namespace+"_"+pvc.Name),
				Type: ptr.To(v1.HostPathDirectoryOrCreate),
			}},
			ClaimRef: &v1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID,
			},
		},
	}
}

// claimChanged provisions a volume for a claim that needs one.
func (p *provisioner) claimChanged(ctx context.Context, pvc *v1.PersistentVolumeClaim) error {
	if pvc.DeletionTimestamp != nil || pvc.Spec.VolumeName != "" || pvc.Status.Phase == v1.ClaimBound {
		return nil
	}
	if pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == v1.PersistentVolumeBlock {
		return fmt.Errorf("claim %s/%s: block volumes are not supported by the local cluster", pvc.Namespace, pvc.Name)
	}
	pv := volumeFor(pvc, p.dir)
	// Any user may write it, as with the kubelet's emptyDir: the pod's user is not known yet.
	if err := os.MkdirAll(pv.Spec.HostPath.Path, 0o777); err != nil {
		return err
	}
	if err := os.Chmod(pv.Spec.HostPath.Path, 0o777); err != nil {
		return err
	}
	_, err := p.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil
	case err != nil:
		return fmt.Errorf("claim %s/%s: %w", pvc.Namespace, pvc.Name, err)
	}
	log.Printf("provisioned %s for claim %s/%s at %s", pv.Name, pvc.Namespace, pvc.Name, pv.Spec.HostPath.Path)
	return nil
}

// volumeChanged deletes a volume of ours whose claim is gone, and its directory.
func (p *provisioner) volumeChanged(ctx context.Context, pv *v1.PersistentVolume) error {
	if pv.Annotations["pv.kubernetes.io/provisioned-by"] != provisionerName || pv.DeletionTimestamp != nil ||
		pv.Status.Phase != v1.VolumeReleased || pv.Spec.PersistentVolumeReclaimPolicy != v1.PersistentVolumeReclaimDelete {
		return nil
	}
	if pv.Spec.HostPath != nil {
		path := filepath.Clean(pv.Spec.HostPath.Path)
		if !strings.HasPrefix(path, filepath.Clean(p.dir)+string(filepath.Separator)) {
			return fmt.Errorf("volume %s: %s is not under %s; leaving it", pv.Name, path, p.dir)
		}
		if err := os.RemoveAll(path); err != nil {
			return fmt.Errorf("volume %s: %w", pv.Name, err)
		}
	}
	err := p.client.CoreV1().PersistentVolumes().Delete(ctx, pv.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: ptr.To(pv.UID)},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("volume %s: %w", pv.Name, err)
	}
	log.Printf("deleted released volume %s", pv.Name)
	return nil
}

// claimedVolume is where a pod's persistentVolumeClaim volume lives on this node; an error
// says why it cannot be used (yet).
func claimedVolume(ctx context.Context, client kubernetes.Interface, namespace string, src *v1.PersistentVolumeClaimVolumeSource) (string, error) {
	pvc, err := client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, src.ClaimName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("persistentvolumeclaim %q: %w", src.ClaimName, err)
	}
	if reason := unusableClaim(pvc); reason != "" {
		return "", fmt.Errorf("%s", reason)
	}
	pv, err := client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("persistentvolumeclaim %q: volume %s: %w", src.ClaimName, pvc.Spec.VolumeName, err)
	}
	switch {
	case pv.Spec.HostPath != nil:
		return hostPathVolume(pv.Spec.HostPath)
	case pv.Spec.Local != nil:
		return filepath.Clean(pv.Spec.Local.Path), nil
	}
	return "", fmt.Errorf("persistentvolumeclaim %q: volume %s is neither hostPath nor local, "+
		"which is all the local pod runner mounts", src.ClaimName, pv.Name)
}

// unusableClaim says why a pod cannot use the claim yet, or "" once it is bound.
func unusableClaim(pvc *v1.PersistentVolumeClaim) string {
	switch {
	case pvc.DeletionTimestamp != nil:
		return fmt.Sprintf("persistentvolumeclaim %q is being deleted", pvc.Name)
	case pvc.Status.Phase != v1.ClaimBound || pvc.Spec.VolumeName == "":
		return fmt.Sprintf("persistentvolumeclaim %q is not bound yet (phase %s)", pvc.Name, pvc.Status.Phase)
	}
	return ""
}
