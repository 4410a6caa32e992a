#pragma once
namespace mtb::test {
// Calls of operator new so far in this process (the test binary replaces it).
long allocation_count();
}  // namespace mtb::test
