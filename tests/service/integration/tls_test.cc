// Mutual TLS between the programs and the coordinator, as users run them: a coordinator
// that requires client certificates of its CA (--tls-client-ca), cohortctl and the sidecar
// presenting theirs (--tls-ca, --tls-cert, --tls-key), and strangers refused: no
// certificate, one of another CA, one of the same CA without the job's name
// (--tls-client-name), and a client that does not trust the coordinator. Certificates
// renewed in place are used without a restart. Certificates come from the openssl command,
// as an admin's (or cert-manager's) would.
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/support/build_paths.h"
#include "tests/support/eventually.h"
#include "tests/support/subprocess.h"

namespace cohort::testing {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string Bin(const std::string& name) { return ::cohort::testing::BinDir() + "/" + name; }

// Runs a shell command; fails the test (with its output) when it fails.
void Shell(const std::string& command) {
  int status = -1;
  std::string out = RunShell(command + " 2>&1", &status);
  ASSERT_EQ(status, 0) << command << "\n" << out;
}

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(absl::StrCat(::testing::TempDir(), "/tls-test-", getpid()));
    mkdir(dir_->c_str(), 0700);
    // Two CAs: the job's, and a stranger's.
    for (const char* ca : {"ca", "other-ca"}) {
      Shell(absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=", ca,
                         " -keyout ", Path(ca), ".key -out ", Path(ca), ".crt"));
    }
    // The coordinator's certificate, for its service name and loopback; clients of each CA.
    Issue("coordinator", "ca", "cohort-coordinator",
          "subjectAltName=DNS:train-coordinator.ml.svc,DNS:localhost,IP:127.0.0.1");
    Issue("client", "ca", "worker-0", "");
    Issue("stranger", "other-ca", "worker-0", "");
    // Clients of a CA shared by two jobs: one carries this job's name, one another job's.
    Issue("named-client", "ca", "worker-0", "subjectAltName=DNS:train.ml.client.cohort.dev");
    Issue("other-job-client", "ca", "worker-0", "subjectAltName=DNS:eval.ml.client.cohort.dev");
    // The stranger's CA's coordinator and client: what a renewal by another CA brings.
    Issue("renewed-coordinator", "other-ca", "cohort-coordinator",
          "subjectAltName=DNS:localhost,IP:127.0.0.1");
  }
  static void TearDownTestSuite() {
    int status;
    RunShell("rm -rf " + *dir_, &status);
    delete dir_;
  }

  static std::string Path(const std::string& name) { return *dir_ + "/" + name; }

  // A key and a certificate NAME.{key,crt} signed by CA.
  static void Issue(const std::string& name, const std::string& ca, const std::string& cn,
                    const std::string& san) {
    std::string ext;
    if (!san.empty()) {
      Shell(absl::StrCat("printf '%s\\n' '", san, "' > ", Path(name), ".ext"));
      ext = absl::StrCat(" -extfile ", Path(name), ".ext");
    }
    Shell(absl::StrCat("openssl req -newkey rsa:2048 -nodes -subj /CN=", cn, " -keyout ",
                       Path(name), ".key -out ", Path(name), ".csr"));
    Shell(absl::StrCat("openssl x509 -req -days 1 -in ", Path(name), ".csr -CA ", Path(ca),
                       ".crt -CAkey ", Path(ca), ".key -CAcreateserial -out ", Path(name), ".crt",
                       ext));
  }

  void SetUp() override {
    Start({"--tls-cert", Path("coordinator.crt"), "--tls-key", Path("coordinator.key"),
           "--tls-client-ca", Path("ca.crt")});
  }

  // (Re)starts the coordinator on a new port with `tls` flags.
  void Start(const std::vector<std::string>& tls) {
    coordinator_.reset();
    port_ = FreePort();
    log_ = Path(absl::StrCat("coordinator-", port_, ".log"));
    std::vector<std::string> argv = {Bin("cohort-coordinator"),
                                     "--listen",
                                     absl::StrCat("127.0.0.1:", port_),
                                     "--http-listen",
                                     "",
                                     "--job",
                                     "worker=1",
                                     "--auxiliary-job",
                                     "sidecar=1"};
    argv.insert(argv.end(), tls.begin(), tls.end());
    coordinator_ = std::make_unique<Subprocess>(argv, std::map<std::string, std::string>{}, log_);
    ASSERT_TRUE(Eventually([&] { return ReadFile(log_).find("serving") != std::string::npos; }))
        << ReadFile(log_);
  }

  std::string Address() const { return absl::StrCat("127.0.0.1:", port_); }

  // cohortctl against the coordinator with `tls` flags, then `args`.
  ProcessResult Ctl(const std::vector<std::string>& tls, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {Bin("cohortctl"), "--coordinator", Address(), "--dial-timeout",
                                     "3s"};
    argv.insert(argv.end(), tls.begin(), tls.end());
    argv.insert(argv.end(), args.begin(), args.end());
    Subprocess ctl(argv);
    return ctl.Wait(absl::Seconds(30));
  }

  std::vector<std::string> Client(const std::string& name, const std::string& ca = "ca") {
    return {"--tls-ca",          Path(ca + ".crt"), "--tls-cert",
            Path(name + ".crt"), "--tls-key",       Path(name + ".key")};
  }

  static std::string* dir_;
  int port_ = 0;
  std::string log_;
  std::unique_ptr<Subprocess> coordinator_;
};

std::string* TlsTest::dir_ = nullptr;

TEST_F(TlsTest, AClientWithTheJobsCertificateIsServed) {
  ProcessResult put = Ctl(Client("client"), {"kv", "put", "model/step", "7"});
  ASSERT_EQ(put.exit_code, 0) << put.err << "\ncoordinator: " << ReadFile(log_);
  ProcessResult get = Ctl(Client("client"), {"kv", "get", "model/step"});
  EXPECT_EQ(get.exit_code, 0) << get.err;
  EXPECT_EQ(get.out, "7");
}

TEST_F(TlsTest, TheCoordinatorIsVerifiedByItsServiceName) {
  std::vector<std::string> tls = Client("client");
  tls.insert(tls.end(), {"--tls-server-name", "train-coordinator.ml.svc"});
  ProcessResult put = Ctl(tls, {"kv", "put", "a", "b"});
  EXPECT_EQ(put.exit_code, 0) << put.err;
  // A name the certificate does not carry is refused, and says why.
  tls.back() = "someone-else.ml.svc";
  ProcessResult wrong = Ctl(tls, {"kv", "put", "a", "c"});
  EXPECT_EQ(wrong.exit_code, 3) << wrong.err;
}

TEST_F(TlsTest, StrangersAreRefusedAndChangeNothing) {
  // No client certificate.
  ProcessResult none = Ctl({"--tls-ca", Path("ca.crt")}, {"kv", "put", "k", "none"});
  EXPECT_EQ(none.exit_code, 3) << none.err;
  EXPECT_NE(none.err.find("TLS"), std::string::npos) << none.err;
  // A certificate of another CA.
  ProcessResult stranger = Ctl(Client("stranger"), {"kv", "put", "k", "stranger"});
  EXPECT_EQ(stranger.exit_code, 3) << stranger.err;
  // Plain text.
  ProcessResult plain = Ctl({}, {"kv", "put", "k", "plain"});
  EXPECT_EQ(plain.exit_code, 3) << plain.err;
  // A client that does not trust the coordinator's CA sends nothing.
  ProcessResult untrusting = Ctl(Client("client", "other-ca"), {"kv", "put", "k", "untrusting"});
  EXPECT_EQ(untrusting.exit_code, 3) << untrusting.err;
  // None of them wrote anything.
  ProcessResult get = Ctl(Client("client"), {"kv", "get", "k"});
  EXPECT_EQ(get.exit_code, 1) << get.out << get.err;
  EXPECT_EQ(get.out, "");
}

// With a CA that signs other jobs' certificates too (a cert-manager issuer), the coordinator
// serves only clients whose certificate carries its job's name.
TEST_F(TlsTest, TheClientNameKeepsOtherJobsOfTheSameCaOut) {
  Start({"--tls-cert", Path("coordinator.crt"), "--tls-key", Path("coordinator.key"),
         "--tls-client-ca", Path("ca.crt"), "--tls-client-name", "train.ml.client.cohort.dev"});
  ProcessResult put = Ctl(Client("named-client"), {"kv", "put", "k", "named"});
  ASSERT_EQ(put.exit_code, 0) << put.err << "\ncoordinator: " << ReadFile(log_);
  for (const char* refused : {"other-job-client", "client"}) {
    ProcessResult other = Ctl(Client(refused), {"kv", "put", "k", refused});
    EXPECT_EQ(other.exit_code, 3) << refused << ": " << other.err;
  }
  ProcessResult get = Ctl(Client("named-client"), {"kv", "get", "k"});
  EXPECT_EQ(get.out, "named") << get.err;
}

// cert-manager (or an admin) rewrites the files in place: the coordinator serves the new
// certificate, and trusts the new client CA, within --tls-refresh, without a restart; the
// clients read theirs again the same way.
TEST_F(TlsTest, ARenewedCertificateIsUsedWithoutARestart) {
  const std::string live = Path(absl::StrCat("live-", getpid()));
  Shell(absl::StrCat("mkdir -p ", live, " && cp ", Path("coordinator.crt"), " ",
                     Path("coordinator.key"), " ", Path("ca.crt"), " ", live));
  Start({"--tls-cert", live + "/coordinator.crt", "--tls-key", live + "/coordinator.key",
         "--tls-client-ca", live + "/ca.crt", "--tls-refresh", "1s"});
  ProcessResult before = Ctl(Client("client"), {"kv", "put", "k", "before"});
  ASSERT_EQ(before.exit_code, 0) << before.err << "\ncoordinator: " << ReadFile(log_);
  // Renewed by another CA (the harder case: a new CA, not only a new leaf).
  Shell(absl::StrCat("cp ", Path("renewed-coordinator.crt"), " ", live, "/coordinator.crt && cp ",
                     Path("renewed-coordinator.key"), " ", live, "/coordinator.key && cp ",
                     Path("other-ca.crt"), " ", live, "/ca.crt"));
  ASSERT_TRUE(Eventually(
      [&] {
        return Ctl(Client("stranger", "other-ca"), {"kv", "put", "after", "yes"}).exit_code == 0;
      },
      absl::Seconds(20)))
      << ReadFile(log_);
  // The old certificates no longer get in, and the coordinator never stopped.
  ProcessResult old = Ctl(Client("client"), {"kv", "put", "old", "yes"});
  EXPECT_EQ(old.exit_code, 3) << old.err;
  ProcessResult get = Ctl(Client("stranger", "other-ca"), {"kv", "get", "k"});
  EXPECT_EQ(get.out, "before") << get.err;
  EXPECT_EQ(ReadFile(log_).find("serving"), ReadFile(log_).rfind("serving")) << ReadFile(log_);
}

TEST_F(TlsTest, BadTlsFlagsAreClearErrors) {
  ProcessResult half =
      Ctl({"--tls-ca", Path("ca.crt"), "--tls-cert", Path("client.crt")}, {"kv", "get", "k"});
  EXPECT_EQ(half.exit_code, 2) << half.err;
  EXPECT_NE(half.err.find("needs both --tls-cert and --tls-key"), std::string::npos) << half.err;
  ProcessResult missing = Ctl({"--tls-ca", Path("absent.crt")}, {"kv", "get", "k"});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("cannot read --tls-ca file"), std::string::npos) << missing.err;
  Shell("echo not a certificate > " + Path("garbage.crt"));
  ProcessResult garbage = Ctl({"--tls-ca", Path("garbage.crt")}, {"kv", "get", "k"});
  EXPECT_EQ(garbage.exit_code, 2) << garbage.err;
  EXPECT_NE(garbage.err.find("holds no PEM block"), std::string::npos) << garbage.err;
  std::vector<std::string> refresh = Client("client");
  refresh.insert(refresh.end(), {"--tls-refresh", "500ms"});
  ProcessResult fraction = Ctl(refresh, {"kv", "get", "k"});
  EXPECT_EQ(fraction.exit_code, 2) << fraction.err;
  EXPECT_NE(fraction.err.find("--tls-refresh \"500ms\" is not a whole number of seconds"),
            std::string::npos)
      << fraction.err;
  // The coordinator's own: a client name without a client CA, and a bad refresh.
  for (const auto& [flags, message] :
       {std::pair{std::vector<std::string>{"--tls-cert", Path("coordinator.crt"), "--tls-key",
                                           Path("coordinator.key"), "--tls-client-name", "x"},
                  "--tls-client-name needs --tls-client-ca"},
        std::pair{std::vector<std::string>{"--tls-cert", Path("coordinator.crt"), "--tls-key",
                                           Path("coordinator.key"), "--tls-refresh", "0s"},
                  "--tls-refresh \"0s\" is not a whole number of seconds, at least 1s"}}) {
    std::vector<std::string> argv = {Bin("cohort-coordinator"),
                                     "--listen",
                                     absl::StrCat("127.0.0.1:", FreePort()),
                                     "--http-listen",
                                     "",
                                     "--job",
                                     "worker=1"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    Subprocess coordinator(argv);
    ProcessResult result = coordinator.Wait(absl::Seconds(30));
    EXPECT_EQ(result.exit_code, 2) << result.err;
    EXPECT_NE(result.err.find(message), std::string::npos) << result.err;
  }
}

// The sidecar reaches the coordinator over mutual TLS; the workload in its pod talks plain
// gRPC to the sidecar's proxy on loopback, as unmodified jaxlib does.
TEST_F(TlsTest, TheSidecarCarriesThePodsCallsOverMutualTls) {
  const int http = FreePort(), proxy = FreePort();
  const std::string log = Path(absl::StrCat("sidecar-", http, ".log"));
  std::vector<std::string> argv = {Bin("cohort-sidecar"),
                                   "--coordinator",
                                   Address(),
                                   "--http-listen",
                                   absl::StrCat("127.0.0.1:", http),
                                   "--proxy-listen",
                                   absl::StrCat("127.0.0.1:", proxy),
                                   "--heartbeat-interval",
                                   "200ms"};
  for (const std::string& flag : Client("client")) argv.push_back(flag);
  Subprocess sidecar(argv,
                     {{"COHORT_JOB_NAME", "worker"},
                      {"COHORT_TASK_ID", "0"},
                      {"COHORT_NUM_TASKS", "1"},
                      {"POD_NAME", "train-worker-0"},
                      {"POD_NAMESPACE", "ml"},
                      {"POD_IP", "127.0.0.1"},
                      {"COHORT_NVML_LIBRARY", Path("no-driver/libnvidia-ml.so.1")}},
                     log);
  // The sidecar's own task registers through the proxy, over TLS upstream.
  ASSERT_TRUE(Eventually(
      [&] {
        ProcessResult tasks = Ctl(Client("client"), {"tasks"});
        for (absl::string_view line : absl::StrSplit(tasks.out, '\n')) {
          if (absl::StrContains(line, "sidecar") && absl::StrContains(line, "CONNECTED"))
            return true;
        }
        return false;
      },
      absl::Seconds(30)))
      << ReadFile(log);
  // A plain client in the pod: the proxy.
  Subprocess put({Bin("cohortctl"), "--coordinator", absl::StrCat("127.0.0.1:", proxy), "kv", "put",
                  "through/proxy", "yes"});
  ProcessResult done = put.Wait(absl::Seconds(30));
  EXPECT_EQ(done.exit_code, 0) << done.err << "\nsidecar: " << ReadFile(log);
  ProcessResult get = Ctl(Client("client"), {"kv", "get", "through/proxy"});
  EXPECT_EQ(get.out, "yes") << get.err;
}

TEST_F(TlsTest, TheSidecarRefusesHalfAClientCertificate) {
  Subprocess sidecar(
      {Bin("cohort-sidecar"), "--coordinator", Address(), "--http-listen",
       absl::StrCat("127.0.0.1:", FreePort()), "--tls-ca", Path("ca.crt"), "--tls-key",
       Path("client.key")},
      {{"COHORT_JOB_NAME", "worker"}, {"COHORT_TASK_ID", "0"}, {"COHORT_NUM_TASKS", "1"}});
  ProcessResult result = sidecar.Wait(absl::Seconds(30));
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.err.find("needs both --tls-cert and --tls-key"), std::string::npos)
      << result.err;
}

}  // namespace
}  // namespace cohort::testing
