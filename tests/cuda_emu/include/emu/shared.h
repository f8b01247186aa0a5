// emu/shared.h — __shared__ memory, one allocation per block.
//
// rewrite.py turns `__shared__ T name[N];` into
//     auto &name = ::emu::static_shared_ref<T[N]>(EMU_SHARED_KEY, __FILE__, __LINE__, "name", align);
// and `extern __shared__ T name[];` into
//     T *name = ::emu::dynamic_shared_ptr<T>();
// Every thread of the block gets the same storage: the first thread to reach a declaration
// allocates it (a separate heap block of exactly its size, so AddressSanitizer reports an access
// past its end), later ones look it up by the declaration's key: the address of a static
// variable in a lambda at the declaration, distinct per template instantiation as on a GPU. The dynamic area is one
// allocation of the launch's shared-memory size. Both are freed when the block ends and start
// filled with a schedule-dependent pattern (see emu/api.h), not zeros: as on a GPU, shared memory
// holds garbage until written.
#ifndef EMU_SHARED_H
#define EMU_SHARED_H

#include <stddef.h>

#include <type_traits>

#include "engine.h"

namespace emu {

#define EMU_SHARED_KEY ([]() -> const void * { static char emu_key; return &emu_key; }())

template <class T>
inline T &static_shared_ref(const void *key, const char *file, int line, const char *name, size_t align = 1) {
    using Elem = typename std::remove_cv<typename std::remove_all_extents<T>::type>::type;
    static_assert(std::is_trivially_default_constructible<Elem>::value,
                  "__shared__ variables must be of a type without a constructor");
    size_t a = alignof(T) > align ? alignof(T) : align;
    return *static_cast<T *>(static_shared(key, file, line, name, sizeof(T), a));
}

template <class T> inline T *dynamic_shared_ptr() { return static_cast<T *>(dynamic_shared()); }

} // namespace emu

#endif
