#include "operator/controller/certificates.h"

#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cohort::controller {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Free>;
using Cert = std::unique_ptr<X509, Free>;

// The error OpenSSL queued for the step that failed.
absl::Status OpenSslError(const char* step) {
  char text[256] = "no detail";
  if (unsigned long code = ERR_get_error(); code != 0) ERR_error_string_n(code, text, sizeof text);
  ERR_clear_error();
  return absl::InternalError(absl::StrCat("issuing the job's certificates: ", step, ": ", text));
}

absl::StatusOr<Key> NewKey() {
  Key key(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!key) return OpenSslError("a P-256 key");
  return key;
}

struct Profile {
  std::string common_name;
  bool ca = false;
  const char* extended_usage = nullptr;  // serverAuth or clientAuth
  std::vector<std::string> dns_names;
};

absl::Status AddExtension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, Free> ext(X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) {
    return OpenSslError(absl::StrCat("extension ", OBJ_nid2sn(nid), "=", value).c_str());
  }
  return absl::OkStatus();
}

// A certificate for `key` with `profile`, signed by `issuer_key` as `issuer` (itself when
// null: a self-signed CA).
absl::StatusOr<Cert> Issue(const CertificateRequest& request, const Profile& profile, EVP_PKEY* key,
                           X509* issuer, EVP_PKEY* issuer_key) {
  Cert cert(X509_new());
  if (!cert || X509_set_version(cert.get(), 2) != 1) return OpenSslError("a certificate");
  std::unique_ptr<BIGNUM, Free> serial(BN_new());
  if (!serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      !BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(cert.get()))) {
    return OpenSslError("a serial number");
  }
  time_t now = absl::ToTimeT(request.now);
  if (!X509_time_adj_ex(X509_getm_notBefore(cert.get()), 0, -300, &now) ||
      !X509_time_adj_ex(X509_getm_notAfter(cert.get()), 0,
                        static_cast<long>(absl::ToInt64Seconds(request.validity)), &now)) {
    return OpenSslError("the validity");
  }
  X509_NAME* name = X509_get_subject_name(cert.get());
  const std::string organization = absl::StrCat("cohort job ", request.job);
  if (X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(organization.c_str()), -1,
                                 -1, 0) != 1 ||
      X509_NAME_add_entry_by_txt(
          name, "CN", MBSTRING_UTF8,
          reinterpret_cast<const unsigned char*>(profile.common_name.c_str()), -1, -1, 0) != 1) {
    return OpenSslError("the subject");
  }
  X509* signer = issuer ? issuer : cert.get();
  if (X509_set_issuer_name(cert.get(), X509_get_subject_name(signer)) != 1 ||
      X509_set_pubkey(cert.get(), key) != 1) {
    return OpenSslError("the issuer and key");
  }
  std::vector<std::pair<int, std::string>> extensions = {
      {NID_basic_constraints, profile.ca ? "critical,CA:TRUE,pathlen:0" : "critical,CA:FALSE"},
      {NID_key_usage, profile.ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature"},
      {NID_subject_key_identifier, "hash"},
      {NID_authority_key_identifier, "keyid:always"},
  };
  if (profile.extended_usage) extensions.emplace_back(NID_ext_key_usage, profile.extended_usage);
  if (!profile.dns_names.empty()) {
    std::vector<std::string> names;
    for (const std::string& dns : profile.dns_names) names.push_back("DNS:" + dns);
    extensions.emplace_back(NID_subject_alt_name, absl::StrJoin(names, ","));
  }
  for (const auto& [nid, value] : extensions) {
    if (auto s = AddExtension(cert.get(), signer, nid, value); !s.ok()) return s;
  }
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) <= 0) return OpenSslError("signing");
  return cert;
}

absl::StatusOr<std::string> Pem(X509* cert, EVP_PKEY* key) {
  std::unique_ptr<BIO, Free> bio(BIO_new(BIO_s_mem()));
  if (!bio) return OpenSslError("a memory buffer");
  const int written =
      cert ? PEM_write_bio_X509(bio.get(), cert)
           : PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr);
  if (written != 1) return OpenSslError("PEM");
  BUF_MEM* memory = nullptr;
  BIO_get_mem_ptr(bio.get(), &memory);
  return std::string(memory->data, memory->length);
}

}  // namespace

absl::StatusOr<JobCertificates> IssueJobCertificates(const CertificateRequest& request) {
  if (request.dns_names.empty()) {
    return absl::InvalidArgumentError("the coordinator's certificate needs at least one name");
  }
  if (request.validity <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("certificates need a positive validity");
  }
  auto ca_key = NewKey();
  if (!ca_key.ok()) return ca_key.status();
  auto ca = Issue(request, {absl::StrCat("cohort CA for ", request.job), true, nullptr, {}},
                  ca_key->get(), nullptr, ca_key->get());
  if (!ca.ok()) return ca.status();
  auto server_key = NewKey();
  if (!server_key.ok()) return server_key.status();
  auto server = Issue(request, {request.dns_names.front(), false, "serverAuth", request.dns_names},
                      server_key->get(), ca->get(), ca_key->get());
  if (!server.ok()) return server.status();
  auto client_key = NewKey();
  if (!client_key.ok()) return client_key.status();
  auto client =
      Issue(request, {absl::StrCat("cohort client of ", request.job), false, "clientAuth", {}},
            client_key->get(), ca->get(), ca_key->get());
  if (!client.ok()) return client.status();

  using Part = std::tuple<std::string*, X509*, EVP_PKEY*>;
  JobCertificates out;
  for (auto [field, cert, key] :
       {Part{&out.ca_cert, ca->get(), nullptr}, Part{&out.coordinator_cert, server->get(), nullptr},
        Part{&out.coordinator_key, nullptr, server_key->get()},
        Part{&out.client_cert, client->get(), nullptr},
        Part{&out.client_key, nullptr, client_key->get()}}) {
    auto pem = Pem(cert, key);
    if (!pem.ok()) return pem.status();
    *field = std::move(*pem);
  }
  return out;
}

}  // namespace cohort::controller
