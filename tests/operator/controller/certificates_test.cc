// The job's certificates, checked with OpenSSL's own verification: each chains to the job's
// CA (and to no other job's), carries the right purpose and names, matches its key, and is
// valid now.
#include "operator/controller/certificates.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace cohort::controller {
namespace {

struct Free {
  void operator()(X509* p) const { X509_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509_STORE* p) const { X509_STORE_free(p); }
  void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); }
};
using Cert = std::unique_ptr<X509, Free>;

Cert ReadCert(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  Cert cert(PEM_read_bio_X509(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  return cert;
}

std::unique_ptr<EVP_PKEY, Free> ReadKey(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  std::unique_ptr<EVP_PKEY, Free> key(PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr));
  BIO_free(bio);
  return key;
}

// OpenSSL's verdict on `leaf` for `purpose` (X509_PURPOSE_SSL_SERVER/CLIENT) under `ca`.
std::string Verify(const std::string& ca_pem, const std::string& leaf_pem, int purpose) {
  Cert ca = ReadCert(ca_pem), leaf = ReadCert(leaf_pem);
  if (!ca || !leaf) return "unparsable";
  std::unique_ptr<X509_STORE, Free> store(X509_STORE_new());
  X509_STORE_add_cert(store.get(), ca.get());
  std::unique_ptr<X509_STORE_CTX, Free> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), leaf.get(), nullptr);
  X509_STORE_CTX_set_purpose(ctx.get(), purpose);
  if (X509_verify_cert(ctx.get()) == 1) return "ok";
  return X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
}

CertificateRequest Request() {
  CertificateRequest r;
  r.job = "ml/train";
  r.dns_names = {"train-coordinator.ml.svc", "train-coordinator.ml.svc.cluster.local"};
  r.now = absl::Now();
  return r;
}

TEST(CertificatesTest, EachCertificateChainsToTheJobsCaForItsPurpose) {
  auto certs = IssueJobCertificates(Request());
  ASSERT_TRUE(certs.ok()) << certs.status();
  EXPECT_EQ(Verify(certs->ca_cert, certs->coordinator_cert, X509_PURPOSE_SSL_SERVER), "ok");
  EXPECT_EQ(Verify(certs->ca_cert, certs->client_cert, X509_PURPOSE_SSL_CLIENT), "ok");
  // Not the other way round: a client certificate cannot serve, a server's cannot log in.
  EXPECT_NE(Verify(certs->ca_cert, certs->client_cert, X509_PURPOSE_SSL_SERVER), "ok");
  EXPECT_NE(Verify(certs->ca_cert, certs->coordinator_cert, X509_PURPOSE_SSL_CLIENT), "ok");
}

TEST(CertificatesTest, AnotherJobsCaTrustsNone) {
  auto mine = IssueJobCertificates(Request());
  auto theirs = IssueJobCertificates(Request());
  ASSERT_TRUE(mine.ok() && theirs.ok());
  EXPECT_NE(mine->ca_cert, theirs->ca_cert);
  EXPECT_NE(Verify(mine->ca_cert, theirs->client_cert, X509_PURPOSE_SSL_CLIENT), "ok");
  EXPECT_NE(Verify(mine->ca_cert, theirs->coordinator_cert, X509_PURPOSE_SSL_SERVER), "ok");
}

TEST(CertificatesTest, TheCoordinatorCarriesItsNamesAndKeysMatch) {
  auto certs = IssueJobCertificates(Request());
  ASSERT_TRUE(certs.ok()) << certs.status();
  Cert server = ReadCert(certs->coordinator_cert);
  ASSERT_TRUE(server);
  for (const char* name : {"train-coordinator.ml.svc", "train-coordinator.ml.svc.cluster.local"}) {
    EXPECT_EQ(X509_check_host(server.get(), name, 0, 0, nullptr), 1) << name;
  }
  EXPECT_NE(X509_check_host(server.get(), "other-coordinator.ml.svc", 0, 0, nullptr), 1);
  auto server_key = ReadKey(certs->coordinator_key);
  auto client_key = ReadKey(certs->client_key);
  ASSERT_TRUE(server_key && client_key);
  EXPECT_EQ(X509_check_private_key(server.get(), server_key.get()), 1);
  Cert client = ReadCert(certs->client_cert);
  EXPECT_EQ(X509_check_private_key(client.get(), client_key.get()), 1);
  EXPECT_NE(X509_check_private_key(client.get(), server_key.get()), 1);
  EXPECT_NE(certs->coordinator_key.find("-----BEGIN PRIVATE KEY-----"), std::string::npos);
}

TEST(CertificatesTest, ValidFromJustBeforeNowForTheValidity) {
  CertificateRequest r = Request();
  r.validity = absl::Hours(2);
  auto certs = IssueJobCertificates(r);
  ASSERT_TRUE(certs.ok()) << certs.status();
  Cert ca = ReadCert(certs->ca_cert);
  const time_t now = absl::ToTimeT(r.now);
  time_t before = now - 60, after_validity = now + 3 * 3600, within = now + 3600;
  EXPECT_LT(X509_cmp_time(X509_get0_notBefore(ca.get()), &before), 0);
  EXPECT_GT(X509_cmp_time(X509_get0_notAfter(ca.get()), &within), 0);
  EXPECT_LT(X509_cmp_time(X509_get0_notAfter(ca.get()), &after_validity), 0);
}

TEST(CertificatesTest, BadRequestsAreRefused) {
  CertificateRequest r = Request();
  r.dns_names.clear();
  EXPECT_EQ(IssueJobCertificates(r).status().code(), absl::StatusCode::kInvalidArgument);
  r = Request();
  r.validity = absl::ZeroDuration();
  EXPECT_EQ(IssueJobCertificates(r).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cohort::controller
