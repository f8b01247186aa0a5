// emu_test.h — helpers for tests that run kernels under the emulator (self-tests and
// tests/kernels/): a device buffer that frees itself, with copies to and from std::vector.
#ifndef EMU_TEST_H
#define EMU_TEST_H

#include <criterion/criterion.h>
#include <cuda_runtime.h>

#include <vector>

template <class T> struct DeviceBuffer {
    T *ptr = nullptr;
    size_t n = 0;

    explicit DeviceBuffer(size_t count) : n(count) {
        cr_assert_eq(cudaMalloc((void **)&ptr, count * sizeof(T)), cudaSuccess);
        cr_assert_eq(cudaMemset(ptr, 0, count * sizeof(T)), cudaSuccess);
    }
    explicit DeviceBuffer(const std::vector<T> &host) : n(host.size()) {
        cr_assert_eq(cudaMalloc((void **)&ptr, n * sizeof(T)), cudaSuccess);
        cr_assert_eq(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
    DeviceBuffer(const DeviceBuffer &) = delete;
    DeviceBuffer &operator=(const DeviceBuffer &) = delete;
    ~DeviceBuffer() { cudaFree(ptr); }

    std::vector<T> to_host() const {
        std::vector<T> host(n);
        cr_assert_eq(cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
        return host;
    }
    void from_host(const std::vector<T> &host) {
        cr_assert_eq(host.size(), n);
        cr_assert_eq(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
};

#endif
