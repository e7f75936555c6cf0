/*
 * jsonscan.h - measuring kernels for contextsvc._native_c (included by hotpath.pyx).
 *
 * They compute how long the JSON text of a Python str, int or float is, in UTF-8 bytes and in
 * UTF-16 code units, without producing it. JSON text follows json.dumps(ensure_ascii=False)
 * except that a lone surrogate is written as its 6-character \udXXX escape. The rules:
 *
 *   '"' '\\' and \b \f \n \r \t       2 characters  ("\n")
 *   other code points < 0x20          6 characters  ("\u001f"); 0x7f is not escaped
 *   other code points < 0x80          1 byte,  1 unit
 *   < 0x800                           2 bytes, 1 unit
 *   0xD800..0xDFFF (lone surrogate)   6 bytes, 6 units (its escape)
 *   other < 0x10000                   3 bytes, 1 unit
 *   >= 0x10000                        4 bytes, 2 units
 *
 * A string is measured as its length plus "extras": esc (what escaping adds, the same in bytes
 * and units), x8 (the extra UTF-8 bytes of non-ASCII code points) and x16 (the extra UTF-16
 * units: astral code points and surrogate escapes).
 *
 * Three kernel sets compute the same numbers: portable C (8-byte SWAR skipping for 1-byte
 * strings; the only one with CONTEXTSVC_NO_SIMD defined), SSE2 (x86-64 baseline, 16 bytes per
 * step) and AVX2 (32 bytes per step, used when the CPU has it; CONTEXTSVC_NO_AVX2 leaves it
 * out). cs_init_kernels picks the best one; cs_use_kernel switches (the tests run them all).
 */
#ifndef CONTEXTSVC_JSONSCAN_H
#define CONTEXTSVC_JSONSCAN_H

#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if !defined(CONTEXTSVC_NO_SIMD) && \
    (defined(__SSE2__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 2))
#include <emmintrin.h>
#define CS_SSE2 1
#else
#define CS_SSE2 0
#endif

/* AVX2 needs GCC/Clang function targets and a run-time CPU check (cs_init_kernels). */
#if CS_SSE2 && !defined(CONTEXTSVC_NO_AVX2) && (defined(__GNUC__) || defined(__clang__)) && \
    (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define CS_AVX2 1
#else
#define CS_AVX2 0
#endif

/*
 * Running totals of a measurement: UTF-8 bytes, and UTF-8 bytes minus UTF-16 units (which only
 * non-ASCII strings change, so the common path updates a single counter).
 */
typedef struct {
    Py_ssize_t u8;
    Py_ssize_t d16;
} cs_acc;

/* What escaping adds to a code point < 0x100 (0 for the Latin-1 upper half). */
static const unsigned char cs_esc_extra[256] = {
    5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 5, 1, 1, 5, 5, /* 0x00: \b \t \n \f \r are short */
    5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, /* 0x10 */
    0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x20: '"' */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x30 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 0x40 */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, /* 0x50: '\\' */
};

/* Set bits of a 16-bit mask (no POPCNT in the x86-64 baseline). */
static inline int cs_popcount16(unsigned int x)
{
    x = x - ((x >> 1) & 0x5555u);
    x = (x & 0x3333u) + ((x >> 2) & 0x3333u);
    x = (x + (x >> 4)) & 0x0F0Fu;
    return (int)((x + (x >> 8)) & 0x1Fu);
}

/* One code point of a 2- or 4-byte string (the scalar rule, used for tails and fallbacks). */
static inline void cs_wide_unit(Py_UCS4 c, Py_ssize_t *esc, Py_ssize_t *x8, Py_ssize_t *x16)
{
    if (c < 0x80) {
        *esc += cs_esc_extra[c];
    } else if (c < 0x800) {
        *x8 += 1;
    } else if (c < 0x10000) {
        if ((c & 0xF800) == 0xD800) {
            *x8 += 5;
            *x16 += 5;
        } else {
            *x8 += 2;
        }
    } else {
        *x8 += 3;
        *x16 += 1;
    }
}

/* ---- portable kernels (any C compiler; also the reference for the SIMD ones) ---- */

#define CS_ONES UINT64_C(0x0101010101010101)
#define CS_HIGHS UINT64_C(0x8080808080808080)

/* Nonzero iff some byte of w is < 0x20, '"', '\\' or >= 0x80 (exact as a yes/no test). */
static inline uint64_t cs_swar_special(uint64_t w)
{
    uint64_t q = w ^ (CS_ONES * '"'), b = w ^ (CS_ONES * '\\');
    uint64_t lt = (w - CS_ONES * 0x20) & ~w;
    uint64_t zq = (q - CS_ONES) & ~q, zb = (b - CS_ONES) & ~b;
    return (w | lt | zq | zb) & CS_HIGHS;
}

static void cs_latin1_portable(const unsigned char *p, Py_ssize_t n, Py_ssize_t *esc_out,
                               Py_ssize_t *hi_out)
{
    const unsigned char *end = p + n;
    Py_ssize_t esc = 0, hi = 0;
    for (; end - p >= 8; p += 8) {
        uint64_t w;
        int i;
        memcpy(&w, p, 8);
        if (!cs_swar_special(w))
            continue;
        for (i = 0; i < 8; i++) {
            esc += cs_esc_extra[p[i]];
            hi += p[i] >> 7;
        }
    }
    for (; p < end; p++) {
        esc += cs_esc_extra[*p];
        hi += *p >> 7;
    }
    *esc_out = esc;
    *hi_out = hi;
}

static Py_ssize_t cs_ascii_portable(const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t esc, hi;
    cs_latin1_portable(p, n, &esc, &hi);
    return esc;
}

static void cs_ucs2_portable(const Py_UCS2 *p, Py_ssize_t n, Py_ssize_t *esc_out,
                             Py_ssize_t *x8_out, Py_ssize_t *x16_out)
{
    Py_ssize_t i, esc = 0, x8 = 0, x16 = 0;
    for (i = 0; i < n; i++)
        cs_wide_unit(p[i], &esc, &x8, &x16);
    *esc_out = esc;
    *x8_out = x8;
    *x16_out = x16;
}

static void cs_ucs4_portable(const Py_UCS4 *p, Py_ssize_t n, Py_ssize_t *esc_out,
                             Py_ssize_t *x8_out, Py_ssize_t *x16_out)
{
    Py_ssize_t i, esc = 0, x8 = 0, x16 = 0;
    for (i = 0; i < n; i++)
        cs_wide_unit(p[i], &esc, &x8, &x16);
    *esc_out = esc;
    *x8_out = x8;
    *x16_out = x16;
}

/* ---- SSE2 kernels (x86-64 baseline), 16 bytes per step ---- */

#if CS_SSE2

/* Sum of the 16 unsigned bytes of v. */
static inline Py_ssize_t cs_hsum_u8(__m128i v)
{
    __m128i s = _mm_sad_epu8(v, _mm_setzero_si128());
    return (Py_ssize_t)_mm_cvtsi128_si32(s) + (Py_ssize_t)_mm_extract_epi16(s, 4);
}

/* Sum of the 4 int32 lanes of v. */
static inline Py_ssize_t cs_hsum_i32(__m128i v)
{
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4E));
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0xB1));
    return (Py_ssize_t)_mm_cvtsi128_si32(v);
}

/* Sum of the 8 int16 lanes of v (each < 32768). */
static inline Py_ssize_t cs_hsum_i16(__m128i v)
{
    return cs_hsum_i32(_mm_madd_epi16(v, _mm_set1_epi16(1)));
}

/* 16 zero bytes then 16 0xff bytes: loading at offset r keeps the last r lanes. */
static const unsigned char cs_tail_mask[32] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
};

/*
 * Classify 16 bytes: *esc = lanes that need escaping, *lng = lanes whose escape is the
 * 6-byte \u00XX form. `ctrl` (bytes < 0x20) is computed by the caller: a signed compare for
 * ASCII data, an unsigned one for Latin-1. Bytes 8..13 are found as (b + 0x78) < -122 in
 * signed arithmetic (they land on -128..-123; no other byte does); of those only 11 is long.
 */
static inline void cs_classify8(__m128i v, __m128i ctrl, __m128i *esc, __m128i *lng)
{
    const __m128i quote = _mm_set1_epi8('"');
    const __m128i bslash = _mm_set1_epi8('\\');
    const __m128i shift = _mm_set1_epi8(0x78);
    const __m128i limit = _mm_set1_epi8((char)-122);
    const __m128i vtab = _mm_set1_epi8(0x0b);
    __m128i shorts = _mm_cmplt_epi8(_mm_add_epi8(v, shift), limit);
    *esc = _mm_or_si128(ctrl, _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)));
    *lng = _mm_or_si128(_mm_andnot_si128(shorts, ctrl), _mm_cmpeq_epi8(v, vtab));
}

/* Escape extras of an ASCII buffer (short ones go to the portable code). */
static Py_ssize_t cs_ascii_sse2(const unsigned char *p, Py_ssize_t n)
{
    const __m128i space = _mm_set1_epi8(0x20);
    const unsigned char *end = p + n;
    Py_ssize_t total = 0;
    if (n < 16)
        return cs_ascii_portable(p, n);
    while (end - p >= 16) {
        /* byte counters: at most 1 per step each, so flush before 255 steps */
        Py_ssize_t steps = (end - p) >> 4;
        __m128i acc_e = _mm_setzero_si128(), acc_l = _mm_setzero_si128();
        if (steps > 255)
            steps = 255;
        for (; steps; steps--, p += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)p), esc, lng;
            cs_classify8(v, _mm_cmplt_epi8(v, space), &esc, &lng);
            acc_e = _mm_sub_epi8(acc_e, esc);
            acc_l = _mm_sub_epi8(acc_l, lng);
        }
        total += cs_hsum_u8(acc_e) + 4 * cs_hsum_u8(acc_l);
    }
    if (p < end) { /* the last 16 bytes, keeping only the lanes not yet counted */
        Py_ssize_t r = end - p;
        __m128i v = _mm_loadu_si128((const __m128i *)(end - 16)), esc, lng;
        __m128i keep = _mm_loadu_si128((const __m128i *)(cs_tail_mask + r));
        cs_classify8(v, _mm_cmplt_epi8(v, space), &esc, &lng);
        total += cs_popcount16((unsigned)_mm_movemask_epi8(_mm_and_si128(esc, keep)));
        total += 4 * cs_popcount16((unsigned)_mm_movemask_epi8(_mm_and_si128(lng, keep)));
    }
    return total;
}

/* Escape extras and non-ASCII byte count of a Latin-1 buffer. */
static void cs_latin1_sse2(const unsigned char *p, Py_ssize_t n, Py_ssize_t *esc_out,
                           Py_ssize_t *hi_out)
{
    const __m128i c1f = _mm_set1_epi8(0x1f);
    const __m128i zero = _mm_setzero_si128();
    const unsigned char *end = p + n;
    Py_ssize_t esc_total = 0, hi_total = 0;
    if (n < 16) {
        cs_latin1_portable(p, n, esc_out, hi_out);
        return;
    }
    while (end - p >= 16) {
        Py_ssize_t steps = (end - p) >> 4;
        __m128i acc_e = zero, acc_l = zero, acc_h = zero;
        if (steps > 255)
            steps = 255;
        for (; steps; steps--, p += 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)p), esc, lng;
            __m128i ctrl = _mm_cmpeq_epi8(_mm_min_epu8(v, c1f), v);
            cs_classify8(v, ctrl, &esc, &lng);
            acc_e = _mm_sub_epi8(acc_e, esc);
            acc_l = _mm_sub_epi8(acc_l, lng);
            acc_h = _mm_sub_epi8(acc_h, _mm_cmplt_epi8(v, zero));
        }
        esc_total += cs_hsum_u8(acc_e) + 4 * cs_hsum_u8(acc_l);
        hi_total += cs_hsum_u8(acc_h);
    }
    if (p < end) {
        Py_ssize_t r = end - p;
        __m128i v = _mm_loadu_si128((const __m128i *)(end - 16)), esc, lng;
        __m128i keep = _mm_loadu_si128((const __m128i *)(cs_tail_mask + r));
        cs_classify8(v, _mm_cmpeq_epi8(_mm_min_epu8(v, c1f), v), &esc, &lng);
        esc_total += cs_popcount16((unsigned)_mm_movemask_epi8(_mm_and_si128(esc, keep)));
        esc_total += 4 * cs_popcount16((unsigned)_mm_movemask_epi8(_mm_and_si128(lng, keep)));
        hi_total += cs_popcount16((unsigned)(_mm_movemask_epi8(v) & _mm_movemask_epi8(keep)));
    }
    *esc_out = esc_total;
    *hi_out = hi_total;
}

/*
 * UCS-2 buffer, 8 code units per step. SSE2 has no unsigned 16-bit compare, so "u <= k" is
 * "saturating u - k == 0". Per unit: x8 = 2 - [u <= 0x7f] - [u <= 0x7ff] (+3 for a surrogate,
 * whose escape is 6 bytes), x16 = 5 per surrogate.
 */
static void cs_ucs2_sse2(const Py_UCS2 *p, Py_ssize_t n, Py_ssize_t *esc_out,
                         Py_ssize_t *x8_out, Py_ssize_t *x16_out)
{
    const __m128i zero = _mm_setzero_si128();
    const __m128i c1f = _mm_set1_epi16(0x1f), c7f = _mm_set1_epi16(0x7f);
    const __m128i c7ff = _mm_set1_epi16(0x7ff), five = _mm_set1_epi16(5);
    const __m128i eight = _mm_set1_epi16(8), vtab = _mm_set1_epi16(0x0b);
    const __m128i quote = _mm_set1_epi16('"'), bslash = _mm_set1_epi16('\\');
    const __m128i smask = _mm_set1_epi16((short)0xF800), sval = _mm_set1_epi16((short)0xD800);
    const Py_UCS2 *end = p + n;
    Py_ssize_t esc = 0, x8 = 0, x16 = 0;
    while (end - p >= 8) {
        /* 16-bit counters: at most 2 per step, flushed well before 32768 */
        Py_ssize_t steps = (end - p) >> 3, done;
        __m128i acc_a = zero, acc_e = zero, acc_l = zero, acc_s = zero;
        if (steps > 4096)
            steps = 4096;
        done = steps;
        for (; steps; steps--, p += 8) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            __m128i ctrl = _mm_cmpeq_epi16(_mm_subs_epu16(v, c1f), zero);
            __m128i shorts = _mm_cmpeq_epi16(_mm_subs_epu16(_mm_sub_epi16(v, eight), five), zero);
            __m128i e = _mm_or_si128(ctrl, _mm_or_si128(_mm_cmpeq_epi16(v, quote),
                                                        _mm_cmpeq_epi16(v, bslash)));
            __m128i l = _mm_or_si128(_mm_andnot_si128(shorts, ctrl), _mm_cmpeq_epi16(v, vtab));
            __m128i a1 = _mm_cmpeq_epi16(_mm_subs_epu16(v, c7f), zero);
            __m128i a2 = _mm_cmpeq_epi16(_mm_subs_epu16(v, c7ff), zero);
            __m128i s = _mm_cmpeq_epi16(_mm_and_si128(v, smask), sval);
            acc_e = _mm_sub_epi16(acc_e, e);
            acc_l = _mm_sub_epi16(acc_l, l);
            acc_a = _mm_sub_epi16(_mm_sub_epi16(acc_a, a1), a2);
            acc_s = _mm_sub_epi16(acc_s, s);
        }
        {
            Py_ssize_t surrogates = cs_hsum_i16(acc_s);
            esc += cs_hsum_i16(acc_e) + 4 * cs_hsum_i16(acc_l);
            x8 += 16 * done - cs_hsum_i16(acc_a) + 3 * surrogates;
            x16 += 5 * surrogates;
        }
    }
    for (; p < end; p++)
        cs_wide_unit(*p, &esc, &x8, &x16);
    *esc_out = esc;
    *x8_out = x8;
    *x16_out = x16;
}

/* UCS-4 buffer, 4 code points per step (values <= 0x10FFFF, so signed compares work). */
static void cs_ucs4_sse2(const Py_UCS4 *p, Py_ssize_t n, Py_ssize_t *esc_out,
                         Py_ssize_t *x8_out, Py_ssize_t *x16_out)
{
    const __m128i zero = _mm_setzero_si128();
    const __m128i c20 = _mm_set1_epi32(0x20), c7 = _mm_set1_epi32(7), c14 = _mm_set1_epi32(14);
    const __m128i c7f = _mm_set1_epi32(0x7f), c7ff = _mm_set1_epi32(0x7ff);
    const __m128i cffff = _mm_set1_epi32(0xffff), vtab = _mm_set1_epi32(0x0b);
    const __m128i quote = _mm_set1_epi32('"'), bslash = _mm_set1_epi32('\\');
    const __m128i smask = _mm_set1_epi32((int)0xFFFFF800), sval = _mm_set1_epi32(0xD800);
    const Py_UCS4 *end = p + n;
    Py_ssize_t esc = 0, x8 = 0, x16 = 0;
    while (end - p >= 4) {
        Py_ssize_t steps = (end - p) >> 2;
        __m128i acc_h = zero, acc_e = zero, acc_l = zero, acc_s = zero, acc_x = zero;
        if (steps > (1 << 20))
            steps = 1 << 20;
        for (; steps; steps--, p += 4) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            __m128i ctrl = _mm_cmplt_epi32(v, c20);
            __m128i shorts = _mm_and_si128(_mm_cmpgt_epi32(v, c7), _mm_cmplt_epi32(v, c14));
            __m128i e = _mm_or_si128(ctrl, _mm_or_si128(_mm_cmpeq_epi32(v, quote),
                                                        _mm_cmpeq_epi32(v, bslash)));
            __m128i l = _mm_or_si128(_mm_andnot_si128(shorts, ctrl), _mm_cmpeq_epi32(v, vtab));
            __m128i astral = _mm_cmpgt_epi32(v, cffff);
            __m128i h = _mm_add_epi32(_mm_cmpgt_epi32(v, c7f), _mm_cmpgt_epi32(v, c7ff));
            __m128i s = _mm_cmpeq_epi32(_mm_and_si128(v, smask), sval);
            acc_e = _mm_sub_epi32(acc_e, e);
            acc_l = _mm_sub_epi32(acc_l, l);
            acc_h = _mm_sub_epi32(_mm_sub_epi32(acc_h, h), astral);
            acc_s = _mm_sub_epi32(acc_s, s);
            acc_x = _mm_sub_epi32(acc_x, astral);
        }
        {
            Py_ssize_t surrogates = cs_hsum_i32(acc_s);
            esc += cs_hsum_i32(acc_e) + 4 * cs_hsum_i32(acc_l);
            x8 += cs_hsum_i32(acc_h) + 3 * surrogates;
            x16 += cs_hsum_i32(acc_x) + 5 * surrogates;
        }
    }
    for (; p < end; p++)
        cs_wide_unit(*p, &esc, &x8, &x16);
    *esc_out = esc;
    *x8_out = x8;
    *x16_out = x16;
}

#endif /* CS_SSE2 */

/*
 * ---- AVX2 kernels, 32 bytes per step ----
 * Compiled with a per-function target attribute and used only when the CPU reports AVX2 at
 * run time, so the module still loads on any x86-64. Same arithmetic as the SSE2 kernels;
 * pieces shorter than a vector go to those.
 */

#if CS_AVX2
#define CS_AVX2_FN __attribute__((target("avx2")))

/* Set bits of a 32-bit mask. */
static inline int cs_popcount32(uint32_t x)
{
    x = x - ((x >> 1) & 0x55555555u);
    x = (x & 0x33333333u) + ((x >> 2) & 0x33333333u);
    x = (x + (x >> 4)) & 0x0F0F0F0Fu;
    return (int)((x * 0x01010101u) >> 24);
}

/* 32 zero bytes then 32 0xff bytes: loading at offset r keeps the last r lanes. */
static const unsigned char cs_tail_mask32[64] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
};

CS_AVX2_FN static inline Py_ssize_t cs_hsum_u8_avx2(__m256i v)
{
    __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256());
    __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    return (Py_ssize_t)_mm_cvtsi128_si32(t) + (Py_ssize_t)_mm_extract_epi16(t, 4);
}

CS_AVX2_FN static inline Py_ssize_t cs_hsum_i32_avx2(__m256i v)
{
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
    return (Py_ssize_t)_mm_cvtsi128_si32(t);
}

CS_AVX2_FN static inline Py_ssize_t cs_hsum_i16_avx2(__m256i v)
{
    return cs_hsum_i32_avx2(_mm256_madd_epi16(v, _mm256_set1_epi16(1)));
}

/* As cs_classify8, 32 lanes ("a < b" is written cmpgt(b, a)). */
CS_AVX2_FN static inline void cs_classify8_avx2(__m256i v, __m256i ctrl, __m256i *esc, __m256i *lng)
{
    const __m256i quote = _mm256_set1_epi8('"');
    const __m256i bslash = _mm256_set1_epi8('\\');
    const __m256i shift = _mm256_set1_epi8(0x78);
    const __m256i limit = _mm256_set1_epi8((char)-122);
    const __m256i vtab = _mm256_set1_epi8(0x0b);
    __m256i shorts = _mm256_cmpgt_epi8(limit, _mm256_add_epi8(v, shift));
    *esc = _mm256_or_si256(ctrl, _mm256_or_si256(_mm256_cmpeq_epi8(v, quote),
                                                 _mm256_cmpeq_epi8(v, bslash)));
    *lng = _mm256_or_si256(_mm256_andnot_si256(shorts, ctrl), _mm256_cmpeq_epi8(v, vtab));
}

CS_AVX2_FN static Py_ssize_t cs_ascii_avx2(const unsigned char *p, Py_ssize_t n)
{
    const __m256i space = _mm256_set1_epi8(0x20);
    const unsigned char *end = p + n;
    Py_ssize_t total = 0;
    if (n < 32)
        return cs_ascii_sse2(p, n);
    while (end - p >= 32) {
        Py_ssize_t steps = (end - p) >> 5;
        __m256i acc_e = _mm256_setzero_si256(), acc_l = _mm256_setzero_si256();
        if (steps > 255)
            steps = 255;
        for (; steps; steps--, p += 32) {
            __m256i v = _mm256_loadu_si256((const __m256i *)p), esc, lng;
            cs_classify8_avx2(v, _mm256_cmpgt_epi8(space, v), &esc, &lng);
            acc_e = _mm256_sub_epi8(acc_e, esc);
            acc_l = _mm256_sub_epi8(acc_l, lng);
        }
        total += cs_hsum_u8_avx2(acc_e) + 4 * cs_hsum_u8_avx2(acc_l);
    }
    if (p < end) {
        Py_ssize_t r = end - p;
        __m256i v = _mm256_loadu_si256((const __m256i *)(end - 32)), esc, lng;
        __m256i keep = _mm256_loadu_si256((const __m256i *)(cs_tail_mask32 + r));
        cs_classify8_avx2(v, _mm256_cmpgt_epi8(space, v), &esc, &lng);
        total += cs_popcount32((uint32_t)_mm256_movemask_epi8(_mm256_and_si256(esc, keep)));
        total += 4 * cs_popcount32((uint32_t)_mm256_movemask_epi8(_mm256_and_si256(lng, keep)));
    }
    return total;
}

CS_AVX2_FN static void cs_latin1_avx2(const unsigned char *p, Py_ssize_t n, Py_ssize_t *esc_out,
                                      Py_ssize_t *hi_out)
{
    const __m256i c1f = _mm256_set1_epi8(0x1f);
    const __m256i zero = _mm256_setzero_si256();
    const unsigned char *end = p + n;
    Py_ssize_t esc_total = 0, hi_total = 0;
    if (n < 32) {
        cs_latin1_sse2(p, n, esc_out, hi_out);
        return;
    }
    while (end - p >= 32) {
        Py_ssize_t steps = (end - p) >> 5;
        __m256i acc_e = zero, acc_l = zero, acc_h = zero;
        if (steps > 255)
            steps = 255;
        for (; steps; steps--, p += 32) {
            __m256i v = _mm256_loadu_si256((const __m256i *)p), esc, lng;
            __m256i ctrl = _mm256_cmpeq_epi8(_mm256_min_epu8(v, c1f), v);
            cs_classify8_avx2(v, ctrl, &esc, &lng);
            acc_e = _mm256_sub_epi8(acc_e, esc);
            acc_l = _mm256_sub_epi8(acc_l, lng);
            acc_h = _mm256_sub_epi8(acc_h, _mm256_cmpgt_epi8(zero, v));
        }
        esc_total += cs_hsum_u8_avx2(acc_e) + 4 * cs_hsum_u8_avx2(acc_l);
        hi_total += cs_hsum_u8_avx2(acc_h);
    }
    if (p < end) {
        Py_ssize_t r = end - p;
        __m256i v = _mm256_loadu_si256((const __m256i *)(end - 32)), esc, lng;
        __m256i keep = _mm256_loadu_si256((const __m256i *)(cs_tail_mask32 + r));
        uint32_t kept = (uint32_t)_mm256_movemask_epi8(keep);
        cs_classify8_avx2(v, _mm256_cmpeq_epi8(_mm256_min_epu8(v, c1f), v), &esc, &lng);
        esc_total += cs_popcount32((uint32_t)_mm256_movemask_epi8(esc) & kept);
        esc_total += 4 * cs_popcount32((uint32_t)_mm256_movemask_epi8(lng) & kept);
        hi_total += cs_popcount32((uint32_t)_mm256_movemask_epi8(v) & kept);
    }
    *esc_out = esc_total;
    *hi_out = hi_total;
}

CS_AVX2_FN static void cs_ucs2_avx2(const Py_UCS2 *p, Py_ssize_t n, Py_ssize_t *esc_out,
                                    Py_ssize_t *x8_out, Py_ssize_t *x16_out)
{
    const __m256i zero = _mm256_setzero_si256();
    const __m256i c1f = _mm256_set1_epi16(0x1f), c7f = _mm256_set1_epi16(0x7f);
    const __m256i c7ff = _mm256_set1_epi16(0x7ff), five = _mm256_set1_epi16(5);
    const __m256i eight = _mm256_set1_epi16(8), vtab = _mm256_set1_epi16(0x0b);
    const __m256i quote = _mm256_set1_epi16('"'), bslash = _mm256_set1_epi16('\\');
    const __m256i smask = _mm256_set1_epi16((short)0xF800);
    const __m256i sval = _mm256_set1_epi16((short)0xD800);
    const Py_UCS2 *end = p + n;
    Py_ssize_t esc = 0, x8 = 0, x16 = 0, e2, h2, s2;
    while (end - p >= 16) {
        Py_ssize_t steps = (end - p) >> 4, done;
        __m256i acc_a = zero, acc_e = zero, acc_l = zero, acc_s = zero;
        if (steps > 4096)
            steps = 4096;
        done = steps;
        for (; steps; steps--, p += 16) {
            __m256i v = _mm256_loadu_si256((const __m256i *)p);
            __m256i ctrl = _mm256_cmpeq_epi16(_mm256_subs_epu16(v, c1f), zero);
            __m256i shorts = _mm256_cmpeq_epi16(
                _mm256_subs_epu16(_mm256_sub_epi16(v, eight), five), zero);
            __m256i e = _mm256_or_si256(ctrl, _mm256_or_si256(_mm256_cmpeq_epi16(v, quote),
                                                              _mm256_cmpeq_epi16(v, bslash)));
            __m256i l = _mm256_or_si256(_mm256_andnot_si256(shorts, ctrl),
                                        _mm256_cmpeq_epi16(v, vtab));
            __m256i a1 = _mm256_cmpeq_epi16(_mm256_subs_epu16(v, c7f), zero);
            __m256i a2 = _mm256_cmpeq_epi16(_mm256_subs_epu16(v, c7ff), zero);
            __m256i s = _mm256_cmpeq_epi16(_mm256_and_si256(v, smask), sval);
            acc_e = _mm256_sub_epi16(acc_e, e);
            acc_l = _mm256_sub_epi16(acc_l, l);
            acc_a = _mm256_sub_epi16(_mm256_sub_epi16(acc_a, a1), a2);
            acc_s = _mm256_sub_epi16(acc_s, s);
        }
        {
            Py_ssize_t surrogates = cs_hsum_i16_avx2(acc_s);
            esc += cs_hsum_i16_avx2(acc_e) + 4 * cs_hsum_i16_avx2(acc_l);
            x8 += 32 * done - cs_hsum_i16_avx2(acc_a) + 3 * surrogates;
            x16 += 5 * surrogates;
        }
    }
    cs_ucs2_sse2(p, end - p, &e2, &h2, &s2);
    *esc_out = esc + e2;
    *x8_out = x8 + h2;
    *x16_out = x16 + s2;
}

CS_AVX2_FN static void cs_ucs4_avx2(const Py_UCS4 *p, Py_ssize_t n, Py_ssize_t *esc_out,
                                    Py_ssize_t *x8_out, Py_ssize_t *x16_out)
{
    const __m256i zero = _mm256_setzero_si256();
    const __m256i c20 = _mm256_set1_epi32(0x20), c7 = _mm256_set1_epi32(7);
    const __m256i c14 = _mm256_set1_epi32(14), c7f = _mm256_set1_epi32(0x7f);
    const __m256i c7ff = _mm256_set1_epi32(0x7ff), cffff = _mm256_set1_epi32(0xffff);
    const __m256i vtab = _mm256_set1_epi32(0x0b);
    const __m256i quote = _mm256_set1_epi32('"'), bslash = _mm256_set1_epi32('\\');
    const __m256i smask = _mm256_set1_epi32((int)0xFFFFF800), sval = _mm256_set1_epi32(0xD800);
    const Py_UCS4 *end = p + n;
    Py_ssize_t esc = 0, x8 = 0, x16 = 0, e2, h2, s2;
    while (end - p >= 8) {
        Py_ssize_t steps = (end - p) >> 3;
        __m256i acc_h = zero, acc_e = zero, acc_l = zero, acc_s = zero, acc_x = zero;
        if (steps > (1 << 20))
            steps = 1 << 20;
        for (; steps; steps--, p += 8) {
            __m256i v = _mm256_loadu_si256((const __m256i *)p);
            __m256i ctrl = _mm256_cmpgt_epi32(c20, v);
            __m256i shorts = _mm256_and_si256(_mm256_cmpgt_epi32(v, c7), _mm256_cmpgt_epi32(c14, v));
            __m256i e = _mm256_or_si256(ctrl, _mm256_or_si256(_mm256_cmpeq_epi32(v, quote),
                                                              _mm256_cmpeq_epi32(v, bslash)));
            __m256i l = _mm256_or_si256(_mm256_andnot_si256(shorts, ctrl),
                                        _mm256_cmpeq_epi32(v, vtab));
            __m256i astral = _mm256_cmpgt_epi32(v, cffff);
            __m256i h = _mm256_add_epi32(_mm256_cmpgt_epi32(v, c7f), _mm256_cmpgt_epi32(v, c7ff));
            __m256i s = _mm256_cmpeq_epi32(_mm256_and_si256(v, smask), sval);
            acc_e = _mm256_sub_epi32(acc_e, e);
            acc_l = _mm256_sub_epi32(acc_l, l);
            acc_h = _mm256_sub_epi32(_mm256_sub_epi32(acc_h, h), astral);
            acc_s = _mm256_sub_epi32(acc_s, s);
            acc_x = _mm256_sub_epi32(acc_x, astral);
        }
        {
            Py_ssize_t surrogates = cs_hsum_i32_avx2(acc_s);
            esc += cs_hsum_i32_avx2(acc_e) + 4 * cs_hsum_i32_avx2(acc_l);
            x8 += cs_hsum_i32_avx2(acc_h) + 3 * surrogates;
            x16 += cs_hsum_i32_avx2(acc_x) + 5 * surrogates;
        }
    }
    cs_ucs4_sse2(p, end - p, &e2, &h2, &s2);
    *esc_out = esc + e2;
    *x8_out = x8 + h2;
    *x16_out = x16 + s2;
}

#endif /* CS_AVX2 */

/* ---- kernel sets, best first; cs_k is the one in use ---- */

typedef struct {
    const char *name;
    Py_ssize_t (*ascii)(const unsigned char *p, Py_ssize_t n);
    void (*latin1)(const unsigned char *p, Py_ssize_t n, Py_ssize_t *esc, Py_ssize_t *hi);
    void (*ucs2)(const Py_UCS2 *p, Py_ssize_t n, Py_ssize_t *esc, Py_ssize_t *x8, Py_ssize_t *x16);
    void (*ucs4)(const Py_UCS4 *p, Py_ssize_t n, Py_ssize_t *esc, Py_ssize_t *x8, Py_ssize_t *x16);
} cs_kernels;

static const cs_kernels cs_kernel_sets[] = {
#if CS_AVX2
    {"avx2", cs_ascii_avx2, cs_latin1_avx2, cs_ucs2_avx2, cs_ucs4_avx2},
#endif
#if CS_SSE2
    {"sse2", cs_ascii_sse2, cs_latin1_sse2, cs_ucs2_sse2, cs_ucs4_sse2},
#endif
    {"portable", cs_ascii_portable, cs_latin1_portable, cs_ucs2_portable, cs_ucs4_portable},
};

#define CS_KERNEL_SETS ((int)(sizeof(cs_kernel_sets) / sizeof(cs_kernel_sets[0])))

static const cs_kernels *cs_k = &cs_kernel_sets[CS_KERNEL_SETS - 1];

static int cs_kernel_count(void) { return CS_KERNEL_SETS; }

static const char *cs_kernel_name(int i) { return cs_kernel_sets[i].name; }

static const char *cs_current_kernel(void) { return cs_k->name; }

/* Whether kernel set i can run on this CPU. */
static int cs_kernel_usable(int i)
{
    if (i < 0 || i >= CS_KERNEL_SETS)
        return 0;
#if CS_AVX2
    if (strcmp(cs_kernel_sets[i].name, "avx2") == 0) {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") ? 1 : 0;
    }
#endif
    return 1;
}

/* Switches to kernel set i (0, or -1 when it cannot run here). */
static int cs_use_kernel(int i)
{
    if (!cs_kernel_usable(i))
        return -1;
    cs_k = &cs_kernel_sets[i];
    return 0;
}

/* Picks the best kernel set this CPU runs. */
static void cs_init_kernels(void)
{
    int i;
    for (i = 0; i < CS_KERNEL_SETS; i++) {
        if (cs_kernel_usable(i)) {
            cs_k = &cs_kernel_sets[i];
            return;
        }
    }
}


/* Slow part of cs_add_str: every string that is not short ASCII. */
static int cs_add_str_general(PyObject *s, cs_acc *acc)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(s), esc = 0, x8 = 0, x16 = 0;
    int kind = PyUnicode_KIND(s);
    if (kind == PyUnicode_1BYTE_KIND) {
        const unsigned char *p = (const unsigned char *)PyUnicode_DATA(s);
        if (PyUnicode_IS_ASCII(s))
            esc = cs_k->ascii(p, n);
        else
            cs_k->latin1(p, n, &esc, &x8);
    } else if (kind == PyUnicode_2BYTE_KIND) {
        cs_k->ucs2((const Py_UCS2 *)PyUnicode_DATA(s), n, &esc, &x8, &x16);
    } else {
        cs_k->ucs4((const Py_UCS4 *)PyUnicode_DATA(s), n, &esc, &x8, &x16);
    }
    acc->u8 += n + 2 + esc + x8;
    acc->d16 += x8 - x16;
    return 0;
}

/* Adds the JSON string literal of s (any str, subclasses included). Returns 0, or -1 on error. */
static inline int cs_add_str(PyObject *s, cs_acc *acc)
{
    Py_ssize_t n, i, esc;
    const unsigned char *p;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0)
        return -1;
#endif
    n = PyUnicode_GET_LENGTH(s);
    if (n >= 16 || !PyUnicode_IS_ASCII(s))
        return cs_add_str_general(s, acc);
    /*
     * Short ASCII (dict keys, tags, ids), nearly always free of escapes: two overlapping words
     * cover the string without reading past it; only a string they flag is walked bytewise.
     */
    p = (const unsigned char *)PyUnicode_DATA(s);
    esc = 0;
    if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, p, 8);
        memcpy(&b, p + n - 8, 8);
        if (!(cs_swar_special(a) | cs_swar_special(b)))
            goto done;
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + n - 4, 4);
        if (!cs_swar_special(((uint64_t)a << 32) | b))
            goto done;
    }
    for (i = 0; i < n; i++)
        esc += cs_esc_extra[p[i]];
done:
    acc->u8 += n + 2 + esc;
    return 0;
}

/* JavaScript's s.length. Returns -1 on error. */
static Py_ssize_t cs_utf16_len(PyObject *s)
{
    Py_ssize_t n, i, astral = 0;
    const Py_UCS4 *p;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0)
        return -1;
#endif
    n = PyUnicode_GET_LENGTH(s);
    if (PyUnicode_KIND(s) != PyUnicode_4BYTE_KIND)
        return n;
    p = (const Py_UCS4 *)PyUnicode_DATA(s);
    for (i = 0; i < n; i++)
        astral += p[i] > 0xFFFF;
    return n + astral;
}

/* Decimal digits of u. */
static inline Py_ssize_t cs_digits(unsigned long long u)
{
    Py_ssize_t d = 1;
    while (u >= 10000) {
        u /= 10000;
        d += 4;
    }
    if (u >= 100)
        d += u >= 1000 ? 3 : 2;
    else if (u >= 10)
        d += 1;
    return d;
}

/* Length of int.__repr__(o) beyond one machine word. Returns -1 on error. */
static Py_ssize_t cs_int_len_slow(PyObject *o)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    PyObject *text;
    Py_ssize_t n;
    if (!overflow) {
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (v < 0)
            return 1 + cs_digits(0ULL - (unsigned long long)v);
        return cs_digits((unsigned long long)v);
    }
    /* big: let int's own repr do it (and refuse what it refuses, as json.dumps does) */
    text = PyLong_Type.tp_repr(o);
    if (text == NULL)
        return -1;
    n = PyUnicode_GET_LENGTH(text);
    Py_DECREF(text);
    return n;
}

/*
 * Length of int.__repr__(o) for any int (subclasses included). Returns -1 on error.
 * Ints of one internal digit (|v| < 2**30, nearly all of them) are read in place.
 */
static inline Py_ssize_t cs_int_len(PyObject *o)
{
#if PY_VERSION_HEX >= 0x030C0000
    if (PyUnstable_Long_IsCompact((PyLongObject *)o)) {
        Py_ssize_t v = PyUnstable_Long_CompactValue((PyLongObject *)o);
        return v < 0 ? 1 + cs_digits(0ULL - (unsigned long long)v) : cs_digits((unsigned long long)v);
    }
#else
    Py_ssize_t size = Py_SIZE(o);
    if (size == 0)
        return 1;
    if (size == 1 || size == -1)
        return (size < 0) + cs_digits(((PyLongObject *)o)->ob_digit[0]);
#endif
    return cs_int_len_slow(o);
}

/* 10^0 .. 10^21, all exact doubles (5^22 is the first power of five beyond 2^53). */
static const double cs_pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                  1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                  1e16, 1e17, 1e18, 1e19, 1e20, 1e21};

/* Length of Node's text for a double of k significant digits worth 0.DIGITS * 10^n
 * (ECMAScript Number::toString; _native_py.number_text spells out the four layouts). */
static Py_ssize_t cs_number_layout_len(Py_ssize_t k, Py_ssize_t n)
{
    Py_ssize_t e;
    if (k <= n && n <= 21)
        return n;                 /* digits, then n - k zeros */
    if (0 < n && n <= 21)
        return k + 1;             /* digits with a point after n of them */
    if (-6 < n && n <= 0)
        return 2 - n + k;         /* "0.", -n zeros, digits */
    e = n - 1;                    /* d[.ddd]e+N / e-N */
    return (k == 1 ? 1 : k + 1) + 2 + cs_digits((unsigned long long)(e < 0 ? -e : e));
}

/*
 * Length of a float as Node's JSON.stringify writes it (_native_py.number_text); NaN and the
 * infinities raise ValueError, as they are not JSON. Returns -1 on error.
 *
 * Two fast cases avoid running dtoa:
 *   - integral |d| < 1e21: its digits (and "-" when negative; -0.0 is "0"). Node writes the
 *     shortest digits padded with zeros, which has as many digits as the integer itself: the
 *     powers of ten up to 1e21 are exact doubles, so the digits never round up to one more;
 *   - |d| >= 1e-6 and |d| = m / 10^k exactly as a double for some k <= 8 with m * 10^k small:
 *     Node writes it in decimal, and the smallest such k is its number of decimals (fewer
 *     decimals = fewer significant digits at a given magnitude). m < 2^53 and 10^k are exact,
 *     and IEEE division is correctly rounded, so m / 10^k == |d| is precisely "the decimal
 *     m e-k reads back as |d|". The product |d| * 10^k is kept below 2^50 so that its rounding
 *     error cannot hide the right m from m-1..m+1.
 * Anything else reads the shortest digits from PyOS_double_to_string (which float.__repr__
 * calls) and lays them out as Node does.
 */
static Py_ssize_t cs_float_len(PyObject *o)
{
    double d = PyFloat_AS_DOUBLE(o), a = fabs(d);
    Py_ssize_t sign = d < 0 ? 1 : 0;
    char *text;
    const char *p;
    Py_ssize_t whole = 0, exponent = 0, i = 0, first = -1, last = -1;
    int point = 0;
    if (!isfinite(d)) {
        PyObject *r = PyFloat_Type.tp_repr(o);
        if (r != NULL) {
            PyErr_Format(PyExc_ValueError, "Out of range float values are not JSON compliant: %U", r);
            Py_DECREF(r);
        }
        return -1;
    }
    if (a == 0)
        return 1;
    if (a < 1e21 && a == floor(a)) {
        Py_ssize_t n = 1;
        while (n < 21 && a >= cs_pow10[n])
            n++;
        return sign + n;
    }
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD == 0
    if (a >= 1e-6 && a < 1e16) {
        int k;
        for (k = 1; k <= 8; k++) {
            double p10 = cs_pow10[k], v = a * p10;
            long long m;
            int c;
            if (v >= 1125899906842624.0) /* 2^50 */
                break;
            m = (long long)(v + 0.5);
            for (c = 0; c < 3; c++) { /* m, then its neighbours */
                long long cand = c == 0 ? m : (c == 1 ? m - 1 : m + 1);
                if (cand > 0 && (double)cand / p10 == a) {
                    Py_ssize_t digits = cs_digits((unsigned long long)cand);
                    return sign + 1 + (digits > k ? digits : k + 1);
                }
            }
        }
    }
#endif
    text = PyOS_double_to_string(a, 'r', 0, 0, NULL);
    if (text == NULL)
        return -1;
    /* "DIGITS[.DIGITS][e+NN|e-NN]": find the significant digits and where the point falls */
    for (p = text; *p && *p != 'e'; p++) {
        if (*p == '.') {
            point = 1;
            continue;
        }
        if (!point)
            whole++;
        if (*p != '0') {
            if (first < 0)
                first = i;
            last = i;
        }
        i++;
    }
    if (*p == 'e')
        exponent = atoi(p + 1);
    PyMem_Free(text);
    return sign + cs_number_layout_len(last - first + 1, whole + exponent - first);
}

#endif /* CONTEXTSVC_JSONSCAN_H */
