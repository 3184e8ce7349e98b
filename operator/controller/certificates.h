#pragma once
// Certificates the operator issues per CoordinatedJob for mutual TLS between the job's
// coordinator and its clients (the sidecars and the operator's own polls): a CA of the job's
// own, a server certificate for the coordinator's Service names, and a client certificate.
// Everything is PEM, for the job's Secret. OpenSSL does the cryptography; this file only
// says what goes into each certificate (no library issues certificates from C++ with less).

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace cohort::controller {

struct JobCertificates {
  std::string ca_cert;           // the job's CA: signs the two below, trusted by both ends
  std::string coordinator_cert;  // serverAuth, the coordinator's DNS names
  std::string coordinator_key;
  std::string client_cert;  // clientAuth, for the sidecars and the operator
  std::string client_key;
};

struct CertificateRequest {
  std::string job;                     // namespace/name, in the subjects
  std::vector<std::string> dns_names;  // the coordinator's names (its Service's)
  absl::Time now;
  absl::Duration validity = absl::Hours(24 * 365);
};

// A new CA and the two certificates it signs, each with a fresh P-256 key. Valid from five
// minutes before `now` (clocks differ) for `validity`.
absl::StatusOr<JobCertificates> IssueJobCertificates(const CertificateRequest& request);

}  // namespace cohort::controller
