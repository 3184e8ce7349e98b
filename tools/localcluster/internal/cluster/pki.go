package cluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

const certValidity = 10 * 365 * 24 * time.Hour

// certificateAuthority signs the cluster's certificates.
type certificateAuthority struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// certRequest is one certificate to issue: a client identity (CN user, O groups) or a
// serving certificate (DNS names and IPs).
type certRequest struct {
	file   string // base name: FILE.crt and FILE.key
	cn     string
	groups []string
	dns    []string
	ips    []net.IP
	server bool
}

// ensurePKI creates the CA, every certificate and the service-account key pair on the
// first `up` and reuses them after that.
func ensurePKI(l Layout, s Settings) error {
	if err := os.MkdirAll(l.PKI, 0o700); err != nil {
		return err
	}
	ca, err := loadOrCreateCA(l)
	if err != nil {
		return err
	}
	gw, err := s.Gateway()
	if err != nil {
		return err
	}
	serviceIP, err := s.APIServiceIP()
	if err != nil {
		return err
	}
	requests := []certRequest{
		{file: "apiserver", cn: "kube-apiserver", server: true,
			dns: []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc",
				"kubernetes.default.svc.cluster.local", "localhost"},
			ips: []net.IP{net.IP(gw.Addr().AsSlice()), net.IP(serviceIP.AsSlice()), net.IPv4(127, 0, 0, 1)}},
		{file: "admin", cn: "cohort-admin", groups: []string{"system:masters"}},
		{file: "controller-manager", cn: "system:kube-controller-manager"},
		{file: "scheduler", cn: "system:kube-scheduler"},
		// The coscheduling addon's scheduler: the kube-scheduler roles and PodGroups
		// (addons/coscheduling-rbac.yaml).
		{file: "coscheduler", cn: "cohort-coscheduler"},
		// The runner reads any ConfigMap and Secret and requests tokens,
		// which the node authorizer would not allow a kubelet: it runs as an admin.
		{file: "pod-runner", cn: "cohort-pod-runner", groups: []string{"system:masters"}},
		{file: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", groups: []string{"system:masters"}},
		{file: "node", cn: "system:node:" + s.NodeName, server: true,
			dns: []string{s.NodeName}, ips: []net.IP{net.IP(gw.Addr().AsSlice())}},
	}
	for _, r := range requests {
		if fileExists(l.PKIFile(r.file+".key")) && certCovers(l.PKIFile(r.file+".crt"), r.ips) {
			continue
		}
		if err := ca.issue(l, r); err != nil {
			return fmt.Errorf("certificate %s: %w", r.file, err)
		}
	}
	return ensureServiceAccountKey(l)
}

func loadOrCreateCA(l Layout) (*certificateAuthority, error) {
	certPath, keyPath := l.PKIFile("ca.crt"), l.PKIFile("ca.key")
	if fileExists(certPath) && fileExists(keyPath) {
		return loadCA(certPath, keyPath)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "cohort-local-cluster-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, key.Public(), key)
	if err != nil {
		return nil, err
	}
	if err := writeKey(keyPath, key); err != nil {
		return nil, err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return nil, err
	}
	return loadCA(certPath, keyPath)
}

func loadCA(certPath, keyPath string) (*certificateAuthority, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM data", certPath)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	block, _ = pem.Decode(keyPEM)
	if block == nil {
		return nil, fmt.Errorf("%s: no PEM data", keyPath)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, err
	}
	key, ok := parsed.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: not a signing key", keyPath)
	}
	return &certificateAuthority{cert: cert, key: key}, nil
}

func (ca *certificateAuthority) issue(l Layout, r certRequest) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	usage := x509.ExtKeyUsageClientAuth
	if r.server {
		usage = x509.ExtKeyUsageServerAuth
	}
	template := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: r.cn, Organization: r.groups},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     r.dns,
		IPAddresses:  r.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca.cert, key.Public(), ca.key)
	if err != nil {
		return err
	}
	if err := writeKey(l.PKIFile(r.file+".key"), key); err != nil {
		return err
	}
	return writePEM(l.PKIFile(r.file+".crt"), "CERTIFICATE", der, 0o644)
}

// certCovers says whether the certificate exists and names every address in ips; a
// serving certificate is issued again when the pod network (and so the gateway) changed.
func certCovers(path string, ips []net.IP) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	block, _ := pem.Decode(data)
	if block == nil {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return false
	}
	for _, want := range ips {
		found := false
		for _, have := range cert.IPAddresses {
			found = found || have.Equal(want)
		}
		if !found {
			return false
		}
	}
	return true
}

// ensureServiceAccountKey creates the key pair that signs service-account tokens.
func ensureServiceAccountKey(l Layout) error {
	if fileExists(l.PKIFile("sa.key")) && fileExists(l.PKIFile("sa.pub")) {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeKey(l.PKIFile("sa.key"), key); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	return writePEM(l.PKIFile("sa.pub"), "PUBLIC KEY", pub, 0o644)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
