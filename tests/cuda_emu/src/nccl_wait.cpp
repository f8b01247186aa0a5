// nccl_wait.cpp — host threads blocked in emulated NCCL calls, and deadlock detection.
//
// A wait never times out: a rank that is merely slow (computing, loading, sleeping) can take as
// long as it likes. A deadlock is found instead, when it forms, from what is known for certain:
//   - a rank whose communicator was destroyed will never arrive;
//   - a rank whose driving thread (the last one that called a collective on it outside a
//     group) has exited will never arrive (until another thread calls for it);
//   - a rank whose driving thread is blocked in a wait that itself can never end will never
//     arrive (one thread calling for two ranks without a group; two cliques used in opposite
//     orders by two threads).
// A rank with no driving thread yet (a communicator from ncclCommInitAll that no thread has
// called a collective on outside a group, or a rank that has not joined) might still arrive:
// it never counts toward a deadlock, so such a hang is left to the test's own timeout.
// The check runs whenever the picture can get worse: a thread blocks, a communicator is
// destroyed, a driving thread exits. It is exact for what it knows and needs no clock.
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "../include/emu/api.h"
#include "nccl_internal.h"

namespace emu_nccl {

std::mutex mu;
std::condition_variable cv;

struct HostThread {
    bool blocked = false;
    std::vector<Pending> waits; // what it waits for while blocked (the unfinished ones)
    ~HostThread();
};

namespace {

// Never freed: a thread may end (and look here) while the process exits.
std::set<ncclComm_t> &live_comms() {
    static std::set<ncclComm_t> *s = new std::set<ncclComm_t>;
    return *s;
}
std::vector<HostThread *> &blocked_threads() {
    static std::vector<HostThread *> *v = new std::vector<HostThread *>;
    return *v;
}

thread_local HostThread self;

bool finished(const Pending &p) {
    return p.seq == kJoin ? p.clique->joined == p.clique->nranks : p.clique->ops.at(p.seq).done;
}

// Whether rank r of c may still arrive, given the blocked threads known to be released (`ok`).
bool may_arrive(const Clique &c, int r, const std::set<const HostThread *> &ok) {
    if (c.gone[(size_t)r]) return false;
    const ncclComm_t comm = c.comms[(size_t)r];
    if (!comm) return true; // not joined yet: nothing is known of it
    if (comm->driver_exited) return false;
    const HostThread *t = comm->driver;
    return !t || !t->blocked || ok.count(t);
}

// Whether wait p may still finish. Joins: the missing ranks have no communicator yet.
bool may_finish(const Pending &p, const std::set<const HostThread *> &ok) {
    if (p.seq == kJoin || finished(p)) return true;
    const Op &op = p.clique->ops.at(p.seq);
    for (int r = 0; r < p.clique->nranks; r++)
        if (!op.arrived[(size_t)r] && !may_arrive(*p.clique, r, ok)) return false;
    return true;
}

// Why rank r of p's clique cannot arrive (for the report).
std::string why_not(const Pending &p, int r, const HostThread *waiter) {
    const Clique &c = *p.clique;
    if (c.gone[(size_t)r]) return "whose communicator was destroyed before it called it";
    const ncclComm_t comm = c.comms[(size_t)r];
    if (comm->driver_exited) return "whose host thread has exited without calling it";
    if (comm->driver == waiter)
        return "whose host thread is this same blocked one (one host thread that drives several ranks must wrap "
               "the calls in ncclGroupStart/ncclGroupEnd)";
    std::string s = "whose host thread is itself blocked";
    for (const Pending &q : comm->driver->waits)
        if (q.seq != kJoin && !finished(q)) {
            s += " in " + std::string(kind_name(q.clique->ops.at(q.seq).kind)) + " (collective #" +
                 std::to_string(q.seq) + ") as rank " + std::to_string(q.rank) +
                 (q.clique == p.clique ? "" : " of another communicator");
            break;
        }
    return s + ": the ranks call their collectives in different orders";
}

std::string describe(const HostThread *t, const std::set<const HostThread *> &ok) {
    for (const Pending &p : t->waits) {
        if (may_finish(p, ok)) continue;
        const Op &op = p.clique->ops.at(p.seq);
        for (int r = 0; r < p.clique->nranks; r++)
            if (!op.arrived[(size_t)r] && !may_arrive(*p.clique, r, ok))
                return "rank " + std::to_string(p.rank) + ": " + kind_name(op.kind) + " (collective #" +
                       std::to_string(p.seq) + ") waits for rank " + std::to_string(r) + ", " + why_not(p, r, t);
    }
    return "a blocked host thread can never be released";
}

} // namespace

HostThread::~HostThread() {
    std::lock_guard<std::mutex> lock(mu);
    bool drove = false;
    for (ncclComm_t comm : live_comms())
        if (comm->driver == this) {
            comm->driver = nullptr;
            comm->driver_exited = true;
            drove = true;
        }
    if (drove) check_deadlock();
}

void note_driver(ncclComm_t comm) {
    comm->driver = &self;
    comm->driver_exited = false;
}

void comm_created(ncclComm_t comm) { live_comms().insert(comm); }

void comm_destroyed(ncclComm_t comm) {
    Clique *c = comm->clique;
    c->comms[(size_t)comm->rank] = nullptr;
    c->gone[(size_t)comm->rank] = true;
    live_comms().erase(comm);
    c->refs--;
    check_deadlock();
}

void check_deadlock() {
    // The blocked threads that may be released: grow the set until nothing changes; the rest
    // wait for ranks that can never come.
    std::set<const HostThread *> ok;
    for (bool grew = true; grew;) {
        grew = false;
        for (const HostThread *t : blocked_threads())
            if (!ok.count(t) &&
                std::all_of(t->waits.begin(), t->waits.end(), [&ok](const Pending &p) { return may_finish(p, ok); })) {
                ok.insert(t);
                grew = true;
            }
    }
    for (const HostThread *t : blocked_threads())
        if (!ok.count(t)) {
            fprintf(stderr, "EMU FAULT: NCCL: deadlock: %s\n", describe(t, ok).c_str());
            fflush(stderr);
            abort();
        }
}

void wait_all(std::unique_lock<std::mutex> &lock, std::vector<Pending> waits) {
    if (waits.empty()) return;
    HostThread &me = self;
    me.waits = std::move(waits);
    me.blocked = true;
    blocked_threads().push_back(&me);
    for (const Pending &p : me.waits) p.clique->waiting++;
    check_deadlock();
    while (!me.waits.empty()) {
        const Pending p = me.waits.front();
        if (!finished(p)) {
            cv.wait(lock);
            continue;
        }
        if (p.seq != kJoin) {
            Op &op = p.clique->ops.at(p.seq);
            if (--op.remaining == 0) p.clique->ops.erase(p.seq);
        }
        me.waits.erase(me.waits.begin());
        p.clique->waiting--;
        release_if_unused(p.clique);
    }
    me.blocked = false;
    auto &b = blocked_threads();
    b.erase(std::find(b.begin(), b.end(), &me));
}

} // namespace emu_nccl

int emu::nccl_blocked_threads() {
    std::lock_guard<std::mutex> lock(emu_nccl::mu);
    return (int)emu_nccl::blocked_threads().size();
}
