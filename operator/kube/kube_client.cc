#include "operator/kube/kube_client.h"

#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>

#include <boost/asio/ssl.hpp>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace cohort::kube {
namespace {

using web::http::http_request;
using web::http::http_response;
using web::http::client::http_client;
using web::http::client::http_client_config;

std::string Encode(const std::string& s) { return web::uri::encode_data_string(s); }

std::string Query(const ListOptions& options, std::vector<std::string> extra = {}) {
  std::vector<std::string> parts = std::move(extra);
  if (!options.label_selector.empty()) {
    parts.push_back("labelSelector=" + Encode(options.label_selector));
  }
  if (!options.field_selector.empty()) {
    parts.push_back("fieldSelector=" + Encode(options.field_selector));
  }
  if (options.limit > 0) parts.push_back(absl::StrCat("limit=", options.limit));
  if (!options.continue_token.empty()) {
    parts.push_back("continue=" + Encode(options.continue_token));
  }
  return parts.empty() ? "" : "?" + absl::StrJoin(parts, "&");
}

absl::StatusCode CodeForHttp(int http_status, const std::string& reason) {
  switch (http_status) {
    case 400:
    case 422:
      return absl::StatusCode::kInvalidArgument;
    case 401:
      return absl::StatusCode::kUnauthenticated;
    case 403:
      return absl::StatusCode::kPermissionDenied;
    case 404:
      return absl::StatusCode::kNotFound;
    case 409:
      return reason == "AlreadyExists" ? absl::StatusCode::kAlreadyExists
                                       : absl::StatusCode::kAborted;
    case 410:
      return absl::StatusCode::kOutOfRange;
    case 429:
      return absl::StatusCode::kResourceExhausted;
    case 504:
      return absl::StatusCode::kDeadlineExceeded;
    default:
      return http_status >= 500 ? absl::StatusCode::kUnavailable : absl::StatusCode::kUnknown;
  }
}

}  // namespace

absl::Status StatusFromResponse(int http_status, const std::string& body) {
  if (http_status >= 200 && http_status < 300) return absl::OkStatus();
  std::string message, reason;
  json status = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (status.is_object()) {
    message = status.value("message", "");
    reason = status.value("reason", "");
  }
  if (message.empty()) message = body.substr(0, 512);
  return absl::Status(
      CodeForHttp(http_status, reason),
      absl::StrCat("HTTP ", http_status, reason.empty() ? "" : " ", reason, ": ", message));
}

std::string Name(const json& o) { return o.value("/metadata/name"_json_pointer, ""); }
std::string Namespace(const json& o) { return o.value("/metadata/namespace"_json_pointer, ""); }
std::string Uid(const json& o) { return o.value("/metadata/uid"_json_pointer, ""); }
std::string ResourceVersion(const json& o) {
  return o.value("/metadata/resourceVersion"_json_pointer, "");
}

struct KubeClient::Impl {
  std::unique_ptr<http_client> client;        // ordinary requests
  std::unique_ptr<http_client> watch_client;  // long-lived watches
  pplx::cancellation_token_source cancel;
};

namespace {

http_client_config MakeConfig(const KubeConfig& config, std::chrono::seconds timeout) {
  http_client_config cfg;
  cfg.set_timeout(timeout);
  cfg.set_validate_certificates(!config.insecure_skip_tls_verify);
  const std::string ca = config.ca_pem, cert = config.client_cert_pem, key = config.client_key_pem;
  cfg.set_ssl_context_callback([ca, cert, key](boost::asio::ssl::context& ctx) {
    boost::system::error_code ignored;
    if (ca.empty()) {
      ctx.set_default_verify_paths(ignored);
    } else {
      ctx.add_certificate_authority(boost::asio::buffer(ca.data(), ca.size()), ignored);
      if (ignored)
        spdlog::error("kube client: the CA certificate cannot be used: {}", ignored.message());
    }
    if (!cert.empty()) {
      boost::system::error_code error;
      ctx.use_certificate_chain(boost::asio::buffer(cert.data(), cert.size()), error);
      if (!error) {
        ctx.use_private_key(boost::asio::buffer(key.data(), key.size()),
                            boost::asio::ssl::context::pem, error);
      }
      if (error)
        spdlog::error("kube client: the client certificate cannot be used: {}", error.message());
    }
  });
  return cfg;
}

}  // namespace

KubeClient::KubeClient(KubeConfig config, Options options)
    : config_(std::move(config)), options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  impl_->client =
      std::make_unique<http_client>(config_.server, MakeConfig(config_, options_.request_timeout));
  // A watch that sees nothing for this long is dead; the server ends ours well before.
  impl_->watch_client =
      std::make_unique<http_client>(config_.server, MakeConfig(config_, std::chrono::seconds(600)));
}

KubeClient::~KubeClient() { Shutdown(); }

void KubeClient::Shutdown() {
  if (!shut_down_.exchange(true)) impl_->cancel.cancel();
}

std::string KubeClient::Path(const Resource& r, const std::string& ns, const std::string& name,
                             const std::string& subresource) {
  std::string path = r.api_path;
  if (r.namespaced && !ns.empty()) absl::StrAppend(&path, "/namespaces/", Encode(ns));
  absl::StrAppend(&path, "/", r.plural);
  if (!name.empty()) absl::StrAppend(&path, "/", Encode(name));
  if (!subresource.empty()) absl::StrAppend(&path, "/", subresource);
  return path;
}

absl::StatusOr<json> KubeClient::Request(const std::string& method,
                                         const std::string& path_and_query,
                                         const std::string& content_type, const std::string& body) {
  if (shut_down_) return absl::CancelledError("the Kubernetes client is shut down");
  auto token = CurrentToken(config_);
  if (!token.ok()) return token.status();
  http_request request(method);
  request.set_request_uri(path_and_query);
  request.headers().add("Accept", "application/json");
  request.headers().add("User-Agent", options_.user_agent);
  if (!token->empty()) request.headers().add("Authorization", "Bearer " + *token);
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    request.set_body(body, content_type);
  }
  try {
    http_response response = impl_->client->request(request, impl_->cancel.get_token()).get();
    std::string text = response.extract_utf8string(true).get();
    const int code = response.status_code();
    if (code < 200 || code >= 300) return StatusFromResponse(code, text);
    if (text.empty()) return json::object();
    json parsed = json::parse(text, nullptr, false);
    if (parsed.is_discarded()) {
      return absl::InternalError(absl::StrCat(method, " ", path_and_query,
                                              ": the API server sent a body that is not JSON"));
    }
    return parsed;
  } catch (const pplx::task_canceled&) {
    return absl::CancelledError("the Kubernetes client is shut down");
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat(method, " ", config_.server, path_and_query, ": ", e.what()));
  }
}

absl::StatusOr<json> KubeClient::Send(const Call& call) {
  const Resource& r = call.resource;
  switch (call.verb) {
    case Call::Verb::kGet:
      return Request("GET", Path(r, call.ns, call.name), "", "");
    case Call::Verb::kList:
      return ListAll(call);
    case Call::Verb::kCreate:
      return Request("POST", Path(r, call.ns), "application/json", call.body->dump());
    case Call::Verb::kReplace:
      return Request("PUT", Path(r, call.ns, call.name, call.subresource), "application/json",
                     call.body->dump());
    case Call::Verb::kPatch: {
      const char* content_type =
          call.patch_type == PatchType::kMerge            ? "application/merge-patch+json"
          : call.patch_type == PatchType::kStrategicMerge ? "application/strategic-merge-patch+json"
                                                          : "application/json-patch+json";
      return Request("PATCH", Path(r, call.ns, call.name, call.subresource), content_type,
                     call.body->dump());
    }
    case Call::Verb::kDelete: {
      const DeleteOptions& options = call.delete_options;
      json body = {{"apiVersion", "v1"}, {"kind", "DeleteOptions"}};
      if (options.grace_period_seconds) body["gracePeriodSeconds"] = *options.grace_period_seconds;
      if (!options.propagation_policy.empty()) {
        body["propagationPolicy"] = options.propagation_policy;
      }
      if (!options.precondition_uid.empty()) {
        body["preconditions"] = {{"uid", options.precondition_uid}};
      }
      return Request("DELETE", Path(r, call.ns, call.name), "application/json", body.dump());
    }
  }
  return absl::InternalError("unknown verb");
}

absl::StatusOr<json> KubeClient::ListAll(const Call& call) {
  const ListOptions& options = call.list_options;
  ListOptions page = options;
  json all;
  while (true) {
    auto list = Request("GET", Path(call.resource, call.ns) + Query(page), "", "");
    if (!list.ok()) return list.status();
    const std::string next = list->value("/metadata/continue"_json_pointer, std::string());
    if (all.is_null()) {
      all = std::move(*list);
      if (!all.contains("items") || all["items"].is_null()) all["items"] = json::array();
    } else {
      for (auto& item : (*list)["items"]) all["items"].push_back(std::move(item));
    }
    if (options.limit <= 0 || next.empty()) break;
    page.continue_token = next;
  }
  // Every page is from the first page's snapshot; its resourceVersion is the one to watch
  // from, and the merged list has no continuation.
  if (all["metadata"].is_object()) all["metadata"].erase("continue");
  return all;
}

absl::Status KubeClient::Watch(const Resource& r, const std::string& ns, const ListOptions& options,
                               const std::string& resource_version, int timeout_seconds,
                               const std::function<void(const WatchEvent&)>& on_event) {
  if (shut_down_) return absl::CancelledError("the Kubernetes client is shut down");
  auto token = CurrentToken(config_);
  if (!token.ok()) return token.status();
  std::vector<std::string> extra = {"watch=true", "allowWatchBookmarks=true",
                                    absl::StrCat("timeoutSeconds=", timeout_seconds)};
  if (!resource_version.empty()) extra.push_back("resourceVersion=" + Encode(resource_version));
  ListOptions query = options;
  query.limit = 0;
  query.continue_token.clear();
  const std::string path = Path(r, ns) + Query(query, extra);

  http_request request("GET");
  request.set_request_uri(path);
  request.headers().add("Accept", "application/json");
  request.headers().add("User-Agent", options_.user_agent);
  if (!token->empty()) request.headers().add("Authorization", "Bearer " + *token);
  try {
    http_response response = impl_->watch_client->request(request, impl_->cancel.get_token()).get();
    if (response.status_code() != 200) {
      return StatusFromResponse(response.status_code(), response.extract_utf8string(true).get());
    }
    auto body = response.body();
    while (true) {
      concurrency::streams::container_buffer<std::string> line;
      size_t n = body.read_line(line).get();
      if (n == 0 && body.is_eof()) return absl::OkStatus();
      if (line.collection().empty()) continue;
      json event = json::parse(line.collection(), nullptr, false);
      if (event.is_discarded() || !event.is_object()) {
        return absl::InternalError(absl::StrCat("watch ", path, ": an event that is not JSON"));
      }
      // Read without conversions that could throw or overflow: whatever a watch sends.
      const json& type = event["type"];
      WatchEvent e{type.is_string() ? type.get<std::string>() : "", std::move(event["object"])};
      if (e.type == "ERROR") {
        int code = 500;
        if (e.object.is_object() && e.object.contains("code") &&
            e.object["code"].is_number_integer()) {
          const int64_t given = e.object["code"].get<int64_t>();
          if (given >= 100 && given <= 599) code = static_cast<int>(given);
        }
        return StatusFromResponse(code, e.object.dump());
      }
      on_event(e);
    }
  } catch (const pplx::task_canceled&) {
    return absl::CancelledError("the Kubernetes client is shut down");
  } catch (const std::exception& e) {
    if (shut_down_) return absl::CancelledError("the Kubernetes client is shut down");
    return absl::UnavailableError(absl::StrCat("watch ", config_.server, path, ": ", e.what()));
  }
}

}  // namespace cohort::kube
