// What this build's sanitizers change for tests that watch a tallyd from
// outside. tallyd is built as the tests are: with TALLY_SANITIZE, both carry
// ASan and UBSan (GCC says so with __SANITIZE_ADDRESS__).
#pragma once

namespace tally::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// Resident memory drops when tallyd frees memory: not under ASan, which
// keeps freed memory in quarantine.
inline constexpr bool kResidentFollowsFrees = !kSanitized;

// tallyd can run out of file descriptors without false reports: not under
// UBSan, whose vptr check probes memory through a pipe and, with no
// descriptor left for it, reports a valid object (even std::system_category)
// as one with a bad vptr and aborts.
inline constexpr bool kSurvivesDescriptorExhaustion = !kSanitized;

}  // namespace tally::testing
