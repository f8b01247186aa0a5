// emu/unsupported.h — CUDA features the emulator does not model, made compile errors with a
// message that says so (a kernel that needs one keeps a portable twin; see the README).
//
// Each is a function template whose body fails a static_assert when it is called, so merely
// declaring them costs nothing. Qualifiers (__constant__, __managed__) become an identifier whose
// name is the message. __CUDA_ARCH__ is left undefined: code under `#ifdef __CUDA_ARCH__`
// (inline PTX, tensor cores) is not compiled, its #else branch is.
#ifndef EMU_UNSUPPORTED_H
#define EMU_UNSUPPORTED_H

namespace emu {
template <class...> struct dependent_false { static constexpr bool value = false; };
} // namespace emu

#define EMU_UNSUPPORTED(name)                                                                    \
    template <class... A> inline int name(A...) {                                                \
        static_assert(::emu::dependent_false<A...>::value,                                       \
                      #name " is not supported by the CUDA emulator (tests/cuda_emu/README.md)"); \
        return 0;                                                                                \
    }

EMU_UNSUPPORTED(__threadfence_block)
EMU_UNSUPPORTED(__threadfence_system)
EMU_UNSUPPORTED(__syncthreads_count)
EMU_UNSUPPORTED(__syncthreads_and)
EMU_UNSUPPORTED(__syncthreads_or)
EMU_UNSUPPORTED(__activemask)
EMU_UNSUPPORTED(__match_any_sync)
EMU_UNSUPPORTED(__match_all_sync)
EMU_UNSUPPORTED(__reduce_add_sync)
EMU_UNSUPPORTED(__reduce_min_sync)
EMU_UNSUPPORTED(__reduce_max_sync)
EMU_UNSUPPORTED(__reduce_and_sync)
EMU_UNSUPPORTED(__reduce_or_sync)
EMU_UNSUPPORTED(__reduce_xor_sync)
EMU_UNSUPPORTED(__shfl)
EMU_UNSUPPORTED(__shfl_up)
EMU_UNSUPPORTED(__shfl_down)
EMU_UNSUPPORTED(__shfl_xor)
EMU_UNSUPPORTED(__ballot)
EMU_UNSUPPORTED(__any)
EMU_UNSUPPORTED(__all)
EMU_UNSUPPORTED(atomicSub)
EMU_UNSUPPORTED(atomicAnd)
EMU_UNSUPPORTED(atomicOr)
EMU_UNSUPPORTED(atomicXor)
EMU_UNSUPPORTED(atomicInc)
EMU_UNSUPPORTED(atomicDec)
EMU_UNSUPPORTED(atomicAdd_block)
EMU_UNSUPPORTED(atomicAdd_system)
EMU_UNSUPPORTED(__ldcg)
EMU_UNSUPPORTED(__ldca)
EMU_UNSUPPORTED(__ldcs)
EMU_UNSUPPORTED(__ldlu)
EMU_UNSUPPORTED(__ldcv)
EMU_UNSUPPORTED(__stcg)
EMU_UNSUPPORTED(__stcs)
EMU_UNSUPPORTED(__stwb)
EMU_UNSUPPORTED(__stwt)
EMU_UNSUPPORTED(__nanosleep)
EMU_UNSUPPORTED(clock64)
EMU_UNSUPPORTED(__hadd)
EMU_UNSUPPORTED(__hsub)
EMU_UNSUPPORTED(__hmul)
EMU_UNSUPPORTED(__hdiv)
EMU_UNSUPPORTED(__hfma)
EMU_UNSUPPORTED(__hmax)
EMU_UNSUPPORTED(__hmin)
EMU_UNSUPPORTED(__hneg)
EMU_UNSUPPORTED(__habs)
EMU_UNSUPPORTED(__hadd2)
EMU_UNSUPPORTED(__hmul2)
EMU_UNSUPPORTED(__hfma2)
EMU_UNSUPPORTED(__float22half2_rn)
EMU_UNSUPPORTED(__half22float2)
EMU_UNSUPPORTED(__floats2half2_rn)
EMU_UNSUPPORTED(__float2half2_rn)
EMU_UNSUPPORTED(__low2float)
EMU_UNSUPPORTED(__high2float)
EMU_UNSUPPORTED(__float2half_rz)
EMU_UNSUPPORTED(__float2half_rd)
EMU_UNSUPPORTED(__float2half_ru)
EMU_UNSUPPORTED(__float2bfloat16_rz)
EMU_UNSUPPORTED(__fadd_rn)
EMU_UNSUPPORTED(__fmul_rn)
EMU_UNSUPPORTED(__fmaf_rn)
EMU_UNSUPPORTED(__frcp_rn)
EMU_UNSUPPORTED(__fsqrt_rn)
EMU_UNSUPPORTED(__saturatef)
EMU_UNSUPPORTED(__sinf)
EMU_UNSUPPORTED(__cosf)
EMU_UNSUPPORTED(__powf)
EMU_UNSUPPORTED(__popc)
EMU_UNSUPPORTED(__popcll)
EMU_UNSUPPORTED(__clz)
EMU_UNSUPPORTED(__ffs)
EMU_UNSUPPORTED(__brev)
EMU_UNSUPPORTED(__byte_perm)
EMU_UNSUPPORTED(__funnelshift_l)
EMU_UNSUPPORTED(__funnelshift_r)
EMU_UNSUPPORTED(__mul24)
EMU_UNSUPPORTED(__umul24)
EMU_UNSUPPORTED(__mulhi)
EMU_UNSUPPORTED(__umulhi)
EMU_UNSUPPORTED(__vabsdiff4)
EMU_UNSUPPORTED(__dp2a_lo)
EMU_UNSUPPORTED(__dp2a_hi)
#undef EMU_UNSUPPORTED

#define __constant__ __constant___memory_is_not_supported_by_the_CUDA_emulator
#define __managed__ __managed___memory_is_not_supported_by_the_CUDA_emulator

#endif
