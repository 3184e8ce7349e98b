#include "operator/kube/kube_config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "operator/kube/informer.h"

namespace cohort::kube {
namespace {

namespace fs = std::filesystem;

class KubeConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kubeconfig_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  fs::path dir_;
};

TEST_F(KubeConfigTest, ReadsTheCurrentContextWithEmbeddedAndFileCredentials) {
  Write("ca.crt", "CA PEM");
  const std::string path = Write("config", R"(
apiVersion: v1
kind: Config
current-context: b
clusters:
- name: one
  cluster: {server: "https://10.0.0.1:6443/", certificate-authority: ca.crt}
- name: two
  cluster: {server: "https://other", insecure-skip-tls-verify: true}
contexts:
- name: a
  context: {cluster: two, user: u2}
- name: b
  context: {cluster: one, user: u1, namespace: ml}
users:
- name: u1
  user: {client-certificate-data: )" + absl::Base64Escape("CERT") +
                                               R"(, client-key-data: )" +
                                               absl::Base64Escape("KEY") + R"(}
- name: u2
  user: {token: abc}
)");
  auto config = LoadKubeconfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.0.0.1:6443");
  EXPECT_EQ(config->ca_pem, "CA PEM");
  EXPECT_EQ(config->client_cert_pem, "CERT");
  EXPECT_EQ(config->client_key_pem, "KEY");
  EXPECT_EQ(config->default_namespace, "ml");
  EXPECT_FALSE(config->insecure_skip_tls_verify);

  auto other = LoadKubeconfig(path, "a");
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->server, "https://other");
  EXPECT_TRUE(other->insecure_skip_tls_verify);
  EXPECT_EQ(*CurrentToken(*other), "abc");
}

TEST_F(KubeConfigTest, ProblemsAreExplained) {
  EXPECT_EQ(LoadKubeconfig((dir_ / "missing").string()).status().code(),
            absl::StatusCode::kNotFound);
  auto bad = LoadKubeconfig(Write("bad", "current-context: x\ncontexts: []\n"));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("has no context x"), std::string::npos);
  auto exec = LoadKubeconfig(Write("exec", R"(
current-context: c
clusters: [{name: k, cluster: {server: "https://k"}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
users: [{name: u, user: {exec: {command: aws}}}]
)"));
  EXPECT_EQ(exec.status().code(), absl::StatusCode::kUnimplemented);
}

TEST_F(KubeConfigTest, InClusterReadsTheServiceAccountFiles) {
  Write("token", "tok-1\n");
  Write("ca.crt", "CA");
  Write("namespace", "cohort-system");
  setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  auto config = LoadInClusterConfig(dir_.string());
  unsetenv("KUBERNETES_SERVICE_HOST");
  unsetenv("KUBERNETES_SERVICE_PORT");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->server, "https://10.96.0.1:443");
  EXPECT_EQ(config->default_namespace, "cohort-system");
  EXPECT_EQ(*CurrentToken(*config), "tok-1");
  Write("token", "tok-2\n");  // a rotated token is read again
  EXPECT_EQ(*CurrentToken(*config), "tok-2");
  EXPECT_EQ(LoadInClusterConfig(dir_.string()).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ResourceVersionTest, NewerComparesRevisionsAsNumbers) {
  EXPECT_TRUE(NewerResourceVersion("100", "99"));
  EXPECT_FALSE(NewerResourceVersion("99", "100"));
  EXPECT_FALSE(NewerResourceVersion("100", "100"));
  EXPECT_TRUE(NewerResourceVersion("opaque", "100"));
}

}  // namespace
}  // namespace cohort::kube
