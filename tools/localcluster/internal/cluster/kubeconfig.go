package cluster

import (
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a kubeconfig for one certificate identity, with everything
// embedded so the file works on its own (also for cohort's own kubeconfig parser).
func writeKubeconfig(l Layout, s Settings, path, identity string) error {
	ca, err := os.ReadFile(l.PKIFile("ca.crt"))
	if err != nil {
		return err
	}
	cert, err := os.ReadFile(l.PKIFile(identity + ".crt"))
	if err != nil {
		return err
	}
	key, err := os.ReadFile(l.PKIFile(identity + ".key"))
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["cohort-local"] = &clientcmdapi.Cluster{Server: s.APIServerURL(), CertificateAuthorityData: ca}
	cfg.AuthInfos[identity] = &clientcmdapi.AuthInfo{ClientCertificateData: cert, ClientKeyData: key}
	cfg.Contexts["cohort-local"] = &clientcmdapi.Context{Cluster: "cohort-local", AuthInfo: identity, Namespace: "default"}
	cfg.CurrentContext = "cohort-local"
	return clientcmd.WriteToFile(*cfg, path)
}
