// nccl_data.cpp — the data movement of the emulated collectives: all-gather (every rank's
// buffer into every rank's slot), broadcast (the root's buffer everywhere; copied aside first,
// so in-place calls work) and all-reduce, element-wise in rank order 0, 1, ... in the element
// type (f16/bf16: each step in float, rounded back), the result copied to every rank.
#include <stdint.h>
#include <string.h>

#include <vector>

#include "../include/cuda_bf16.h"
#include "nccl_internal.h"

namespace emu_nccl {

size_t nccl_type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    }
    return 0;
}

namespace {

// Element-wise reduction in the element type, ranks in order 0, 1, ...
template <class T> T combine(T a, T b, ncclRedOp_t op) {
    switch (op) {
    case ncclProd: return (T)(a * b);
    case ncclMax: return a > b ? a : b;
    case ncclMin: return a < b ? a : b;
    default: return (T)(a + b); // sum and avg
    }
}

template <class T> void reduce_typed(const Op &op, std::vector<unsigned char> &out) {
    size_t n = op.args[0].count;
    T *acc = (T *)out.data();
    memcpy(acc, op.args[0].send, n * sizeof(T));
    for (size_t r = 1; r < op.args.size(); r++) {
        const T *x = (const T *)op.args[r].send;
        for (size_t i = 0; i < n; i++) acc[i] = combine(acc[i], x[i], op.args[0].op);
    }
    if (op.args[0].op == ncclAvg)
        for (size_t i = 0; i < n; i++) acc[i] = (T)(acc[i] / (T)op.args.size());
}

// 16-bit floats: each step in float, rounded back to the type (what a half adder gives).
void reduce_half(const Op &op, std::vector<unsigned char> &out, bool bf16) {
    size_t n = op.args[0].count;
    uint16_t *acc = (uint16_t *)out.data();
    auto to_f = [bf16](uint16_t h) { return bf16 ? emu_bf16_bits_to_float(h) : emu_half_bits_to_float(h); };
    auto from_f = [bf16](float f) { return bf16 ? emu_float_to_bf16_bits(f) : emu_float_to_half_bits(f); };
    memcpy(acc, op.args[0].send, n * 2);
    for (size_t r = 1; r < op.args.size(); r++) {
        const uint16_t *x = (const uint16_t *)op.args[r].send;
        for (size_t i = 0; i < n; i++) acc[i] = from_f(combine(to_f(acc[i]), to_f(x[i]), op.args[0].op));
    }
    if (op.args[0].op == ncclAvg)
        for (size_t i = 0; i < n; i++) acc[i] = from_f(to_f(acc[i]) / (float)op.args.size());
}

// Signed integers sum as unsigned (wrapping like the GPU, no UB).
template <class S, class U> void reduce_signed(const Op &op, std::vector<unsigned char> &out) {
    if (op.args[0].op == ncclSum) {
        reduce_typed<U>(op, out);
    } else {
        reduce_typed<S>(op, out);
    }
}

} // namespace

void nccl_perform(Op &op) {
    const Args &a0 = op.args[0];
    size_t es = nccl_type_size(a0.type), bytes = a0.count * es;
    size_t nranks = op.args.size();
    switch (op.kind) {
    case Kind::AllGather:
        for (size_t d = 0; d < nranks; d++)
            for (size_t s = 0; s < nranks; s++)
                memmove((char *)op.args[d].recv + s * bytes, op.args[s].send, bytes);
        break;
    case Kind::Broadcast: {
        std::vector<unsigned char> data((const unsigned char *)op.args[a0.root].send,
                                        (const unsigned char *)op.args[a0.root].send + bytes);
        for (size_t d = 0; d < nranks; d++) memmove(op.args[d].recv, data.data(), bytes);
        break;
    }
    case Kind::AllReduce: {
        std::vector<unsigned char> out(bytes);
        switch (a0.type) {
        case ncclInt8: reduce_signed<int8_t, uint8_t>(op, out); break;
        case ncclUint8: reduce_typed<uint8_t>(op, out); break;
        case ncclInt32: reduce_signed<int32_t, uint32_t>(op, out); break;
        case ncclUint32: reduce_typed<uint32_t>(op, out); break;
        case ncclInt64: reduce_signed<int64_t, uint64_t>(op, out); break;
        case ncclUint64: reduce_typed<uint64_t>(op, out); break;
        case ncclFloat16: reduce_half(op, out, false); break;
        case ncclBfloat16: reduce_half(op, out, true); break;
        case ncclFloat32: reduce_typed<float>(op, out); break;
        case ncclFloat64: reduce_typed<double>(op, out); break;
        }
        for (size_t d = 0; d < nranks; d++) memcpy(op.args[d].recv, out.data(), bytes);
        break;
    }
    }
}

} // namespace emu_nccl
