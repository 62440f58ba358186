# Third-party dependencies, all from Debian's packages (scripts/install_deps.sh installs them).
# Each is looked up only when a target that needs it is built: a parent project that takes the
# libraries alone needs neither CLI11 nor GoogleTest nor Google Benchmark.
find_package(Threads REQUIRED)
find_package(OpenMP COMPONENTS CXX)
find_package(nlohmann_json 3.10 REQUIRED)
if(KVEVICT_BUILD_CLI)
  find_package(CLI11 CONFIG REQUIRED)
endif()
set(BLA_VENDOR OpenBLAS)
find_package(BLAS)
if(KVEVICT_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(KVEVICT_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()
