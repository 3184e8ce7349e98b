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
#include "operator/plan/job_tls.h"

namespace cohort::controller {

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
