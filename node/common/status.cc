#include "node/common/status.h"

namespace tally {

Status::Status(Code code, std::string_view msg)
    : state_(std::make_unique<State>(State{code, std::string(msg)})) {}

Status::Status(const Status& other)
    : state_(other.state_ ? std::make_unique<State>(*other.state_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) {
    state_ = other.state_ ? std::make_unique<State>(*other.state_) : nullptr;
  }
  return *this;
}

std::string_view Status::message() const {
  return state_ ? std::string_view(state_->message) : std::string_view();
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(CodeName(state_->code));
  out += ": ";
  out += state_->message;
  return out;
}

std::string_view CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk: return "OK";
    case Status::Code::kInvalidArgument: return "invalid argument";
    case Status::Code::kResourceExhausted: return "resource exhausted";
    case Status::Code::kNotFound: return "not found";
    case Status::Code::kCorruption: return "corruption";
    case Status::Code::kIOError: return "I/O error";
    case Status::Code::kUnavailable: return "unavailable";
  }
  return "unknown";
}

}  // namespace tally
