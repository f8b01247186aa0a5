// nccl_internal.h — one collective as the NCCL emulation sees it: what each rank passed, and
// the data movement that nccl_data.cpp performs once all ranks have arrived.
#ifndef EMU_NCCL_INTERNAL_H
#define EMU_NCCL_INTERNAL_H

#include <stddef.h>

#include <vector>

#include "../include/nccl.h"

namespace emu_nccl {
enum class Kind { AllGather, Broadcast, AllReduce };
inline const char *kind_name(Kind k) {
    return k == Kind::AllGather ? "ncclAllGather" : k == Kind::Broadcast ? "ncclBroadcast" : "ncclAllReduce";
}

struct Args {
    const void *send;
    void *recv;
    size_t count; // elements per rank (all-gather: sent by each rank)
    ncclDataType_t type;
    ncclRedOp_t op;
    int root;
};

struct Op {
    Kind kind;
    std::vector<Args> args; // by rank
    std::vector<bool> arrived;
    int count = 0;     // ranks arrived
    int remaining = 0; // ranks that have not yet seen it done (erased at 0)
    bool done = false;
    ncclResult_t result = ncclSuccess;
};

// Bytes of one element; 0 for an unknown type.
size_t nccl_type_size(ncclDataType_t t);
// Moves the data of a collective whose ranks have all arrived (op.args holds every rank's).
void nccl_perform(Op &op);

} // namespace emu_nccl

#endif
