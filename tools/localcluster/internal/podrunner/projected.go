package podrunner

import (
	"context"
	"fmt"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const defaultTokenExpiration = int64(3600)

// projectedFiles gathers a projected volume; the ServiceAccount admission plugin gives
// every pod one (kube-api-access-*) with a bound token, the cluster CA and the namespace.
func (r *Runner) projectedFiles(ctx context.Context, pod *v1.Pod, sb *sandbox, p *v1.ProjectedVolumeSource) ([]volumeFile, error) {
	var files []volumeFile
	for _, src := range p.Sources {
		var more []volumeFile
		var err error
		switch {
		case src.ServiceAccountToken != nil:
			more, err = r.tokenFile(ctx, pod, src.ServiceAccountToken, p.DefaultMode)
		case src.ConfigMap != nil:
			more, err = r.configMapFiles(ctx, pod.Namespace, src.ConfigMap.Name, src.ConfigMap.Items,
				p.DefaultMode, src.ConfigMap.Optional)
		case src.Secret != nil:
			more, err = r.secretFiles(ctx, pod.Namespace, src.Secret.Name, src.Secret.Items,
				p.DefaultMode, src.Secret.Optional)
		case src.DownwardAPI != nil:
			more, err = r.downwardFiles(pod, sb, src.DownwardAPI.Items, p.DefaultMode)
		default:
			err = fmt.Errorf("projected source not supported by the local pod runner")
		}
		if err != nil {
			return nil, err
		}
		files = append(files, more...)
	}
	return files, nil
}

// tokenFile asks the apiserver for a token bound to this pod, as the kubelet does. The
// token is not refreshed; the apiserver issues long-lived tokens for kube-api-access
// volumes (--service-account-extend-token-expiration), which covers a test run.
func (r *Runner) tokenFile(ctx context.Context, pod *v1.Pod, src *v1.ServiceAccountTokenProjection, defaultMode *int32) ([]volumeFile, error) {
	account := pod.Spec.ServiceAccountName
	if account == "" {
		account = "default"
	}
	expiration := defaultTokenExpiration
	if src.ExpirationSeconds != nil {
		expiration = *src.ExpirationSeconds
	}
	request := &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(expiration),
			BoundObjectRef: &authenticationv1.BoundObjectReference{
				Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID,
			},
		},
	}
	if src.Audience != "" {
		request.Spec.Audiences = []string{src.Audience}
	}
	token, err := r.client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, account, request, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for service account %s: %w", account, err)
	}
	return []volumeFile{{path: src.Path, data: []byte(token.Status.Token), mode: fileMode(nil, defaultMode)}}, nil
}
