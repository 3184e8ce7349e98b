package podrunner

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

func claim(name string) *v1.PersistentVolumeClaim {
	return &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID("u-" + name)},
		Spec: v1.PersistentVolumeClaimSpec{
			AccessModes: []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources: v1.VolumeResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("2Gi")},
			},
			StorageClassName: ptr.To("fast"),
		},
		Status: v1.PersistentVolumeClaimStatus{Phase: v1.ClaimPending},
	}
}

// bound is pvc once kube-controller-manager bound it to volume.
func bound(pvc *v1.PersistentVolumeClaim, volume string) *v1.PersistentVolumeClaim {
	pvc = pvc.DeepCopy()
	pvc.Spec.VolumeName = volume
	pvc.Status.Phase = v1.ClaimBound
	return pvc
}

func TestAClaimWithoutAVolumeGetsADirectoryOfItsOwn(t *testing.T) {
	dir := t.TempDir()
	pvc := claim("state")
	client := fake.NewClientset(pvc)
	p := &provisioner{client: client, dir: dir}
	if err := p.claimChanged(context.Background(), pvc); err != nil {
		t.Fatal(err)
	}
	pv, err := client.CoreV1().PersistentVolumes().Get(context.Background(), "pvc-u-state", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantPath := filepath.Join(dir, "pvc-u-state_ml_state")
	if pv.Spec.HostPath == nil || pv.Spec.HostPath.Path != wantPath {
		t.Fatalf("hostPath = %+v, want %s", pv.Spec.HostPath, wantPath)
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.Namespace != "ml" || ref.Name != "state" || ref.UID != "u-state" {
		t.Errorf("claimRef = %+v, want ml/state u-state", ref)
	}
	if got := pv.Spec.Capacity[v1.ResourceStorage]; got.String() != "2Gi" {
		t.Errorf("capacity = %s, want 2Gi", got.String())
	}
	if pv.Spec.StorageClassName != "fast" || len(pv.Spec.AccessModes) != 1 || pv.Spec.AccessModes[0] != v1.ReadWriteOnce {
		t.Errorf("class %q, access modes %v: want the claim's", pv.Spec.StorageClassName, pv.Spec.AccessModes)
	}
	if pv.Spec.PersistentVolumeReclaimPolicy != v1.PersistentVolumeReclaimDelete ||
		pv.Annotations["pv.kubernetes.io/provisioned-by"] != provisionerName {
		t.Errorf("reclaim %s, annotations %v", pv.Spec.PersistentVolumeReclaimPolicy, pv.Annotations)
	}
	info, err := os.Stat(wantPath)
	if err != nil || !info.IsDir() || info.Mode().Perm() != 0o777 {
		t.Errorf("directory %s: %v %v, want a directory anyone may write", wantPath, info, err)
	}
	// The same event again (a resync, a second update before the binding) changes nothing.
	if err := p.claimChanged(context.Background(), pvc); err != nil {
		t.Errorf("second time: %v", err)
	}
}

func TestBoundAndDeletedClaimsGetNoVolume(t *testing.T) {
	deleting := claim("deleting")
	deleting.DeletionTimestamp = ptr.To(metav1.Now())
	for _, pvc := range []*v1.PersistentVolumeClaim{bound(claim("bound"), "pv-static"), deleting} {
		client := fake.NewClientset(pvc)
		p := &provisioner{client: client, dir: t.TempDir()}
		if err := p.claimChanged(context.Background(), pvc); err != nil {
			t.Fatal(err)
		}
		list, _ := client.CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{})
		if len(list.Items) != 0 {
			t.Errorf("claim %s got volume %s", pvc.Name, list.Items[0].Name)
		}
	}
}

func TestAReleasedVolumeGoesWithItsDirectory(t *testing.T) {
	dir := t.TempDir()
	pv := volumeFor(claim("state"), dir)
	pv.UID = "pv-uid"
	pv.Status.Phase = v1.VolumeReleased
	if err := os.MkdirAll(filepath.Join(pv.Spec.HostPath.Path, "log"), 0o755); err != nil {
		t.Fatal(err)
	}
	foreign := volumeFor(claim("other"), dir)
	foreign.Name = "static"
	foreign.Annotations = nil
	foreign.Status.Phase = v1.VolumeReleased
	client := fake.NewClientset(pv, foreign)
	p := &provisioner{client: client, dir: dir}
	for _, v := range []*v1.PersistentVolume{pv, foreign} {
		if err := p.volumeChanged(context.Background(), v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(pv.Spec.HostPath.Path); !os.IsNotExist(err) {
		t.Errorf("directory %s still there: %v", pv.Spec.HostPath.Path, err)
	}
	list, _ := client.CoreV1().PersistentVolumes().List(context.Background(), metav1.ListOptions{})
	if len(list.Items) != 1 || list.Items[0].Name != "static" {
		t.Errorf("volumes left: %v, want only the one another provisioner made", list.Items)
	}
}

func TestAPersistentVolumeClaimVolumeIsItsBoundVolumesDirectory(t *testing.T) {
	dir := t.TempDir()
	pvc := claim("state")
	pv := volumeFor(pvc, dir)
	client := fake.NewClientset(bound(pvc, pv.Name), pv)
	r := &Runner{client: client}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "coordinator", Namespace: "ml", UID: "pod-1"},
		Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "state"},
		}}}},
	}
	paths, err := prepareVolumes(context.Background(), r, pod, &sandbox{dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if paths["data"] != pv.Spec.HostPath.Path {
		t.Errorf("volume data at %q, want %q", paths["data"], pv.Spec.HostPath.Path)
	}
	if info, err := os.Stat(paths["data"]); err != nil || !info.IsDir() {
		t.Errorf("the volume's directory is made when missing: %v", err)
	}
}
