// A job's transport security: the mode, and the certificates the operator issues for it
// (controller/certificates.h issues them; the plan puts them in the job's Secret).
#pragma once

#include <string>

namespace cohort::controller {

// How a job's coordinator and sidecars talk (OperatorSettings::job_tls, fixed per job when its
// token Secret is made).
enum class JobTls {
  kNone,         // plain gRPC, guarded by the token
  kOperator,     // mutual TLS with certificates the operator issued (in the token Secret)
  kCertManager,  // mutual TLS with certificates cert-manager issues (and renews)
};

// PEM, for the job's Secret.
struct JobCertificates {
  std::string ca_cert;           // the job's CA: signs the two below, trusted by both ends
  std::string coordinator_cert;  // serverAuth, the coordinator's DNS names
  std::string coordinator_key;
  std::string client_cert;  // clientAuth, for the sidecars and the operator
  std::string client_key;
};

}  // namespace cohort::controller
