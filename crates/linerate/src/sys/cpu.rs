//! The CPU's optional instruction sets: code that runs faster with them is compiled for them
//! as well, and chosen at run time, so that one generic x86-64 binary uses them where they are.

/// Runs `f`, compiled with AVX2 when this CPU has it (checked at run time, cached by the
/// standard library), otherwise as the crate was built. For loops over a batch whose lanes are
/// independent (the MurmurHash3 of 64 packets' addresses): with AVX2 the compiler computes
/// eight 32-bit lanes at once (`vpmulld`), where generic x86-64 has no 32-bit lane multiply
/// and does them one by one. `f` must be inlined into the AVX2 body: pass a closure marked
/// `#[inline(always)]`, whose calls are `#[inline(always)]` too.
#[inline(always)]
pub(crate) fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        #[inline]
        fn avx2<R>(f: impl FnOnce() -> R) -> R {
            f()
        }
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: `avx2` only needs the CPU to have AVX2, which was just checked.
            return unsafe { avx2(f) };
        }
    }
    f()
}

#[cfg(all(test, not(loom)))]
mod tests {
    #[test]
    fn runs_the_closure_once_either_way() {
        let mut n = 0;
        let r = super::with_avx2(|| {
            n += 1;
            (0..64u32)
                .map(|i| i.wrapping_mul(0xcc9e_2d51))
                .fold(0, u32::wrapping_add)
        });
        assert_eq!(n, 1);
        assert_eq!(
            r,
            (0..64u32)
                .map(|i| i.wrapping_mul(0xcc9e_2d51))
                .fold(0, u32::wrapping_add)
        );
    }
}
