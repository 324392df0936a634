/* SPDX-License-Identifier: MIT */
/*
 * Private: the argument checks of treadle's calls (treadle.h, PARAMETERS).
 * Included by <treadle.h>; nothing here is to be used by name.
 *
 * Each checked function gets a function-like macro of its own name, which
 * passes its arguments to the function unchanged and, before that, checks
 * each one's type with a static assertion: where two arguments of different
 * kinds were swapped, the program does not compile (GCC 12 only warns about
 * most of those, and about some not at all).  The exported functions stay
 * what they were: &tdl_read, (tdl_read)(...) and a macro name not followed
 * by "(" name the function itself, and a build with TDL_NO_ARG_CHECKS
 * defined, C++ (which refuses those swaps itself), C before C11,
 * compilers other than GCC and clang, and the library's own sources
 * (TDL_BUILDING: they define the functions) get no macros.
 *
 * What a parameter takes (the second element of each slot below):
 *   TDL__NUM        a number (integer, enum, bool, floating): any pointer is
 *                   refused;
 *   TDL__DATA       a pointer to data (a buffer, a string) or NULL: a number
 *                   other than 0 is refused;
 *   TDL__PTR, T     a T, a void * or NULL (T an object pointer type, whose
 *                   pointee may differ in qualifiers: a tdl_addr * for a
 *                   const tdl_addr *);
 *   TDL__OPT, T     a T or NULL, not even a void *: options, where a data
 *                   pointer that took their place must not pass;
 *   TDL__FN, T      the function pointer type T or NULL;
 *   TDL__NOT, T     as TDL__DATA, except a T: the call's own function type
 *                   (a function is never its data) or its own object (a
 *                   channel is not the value it sends, a reader not the
 *                   buffer it reads into).
 * A null pointer constant (NULL or 0) passes wherever a pointer does.
 *
 * The preprocessor cuts a macro's arguments at every comma outside
 * parentheses, braces included: a compound literal with two members
 * (&(tdl_fiber_options){.name = "x", .detached = true}) makes more pieces
 * than the function has parameters.  Then only the leading parameters that
 * cannot hold such a literal (the second argument of TDL__CK_CALLn) are
 * checked, and the call is made with every piece, as written; fewer pieces
 * than parameters go to the function unchecked (and fail there).  At most 64
 * pieces.
 */
#ifndef TREADLE_PRIVATE_CHECKS_H
#define TREADLE_PRIVATE_CHECKS_H

#if !defined(__cplusplus) && !defined(TDL_BUILDING) && !defined(TDL_NO_ARG_CHECKS) && \
    (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 5)) && defined(__STDC_VERSION__) && \
    __STDC_VERSION__ >= 201112L
#define TDL__ARG_CHECKS 1

/* ---- what a parameter takes ---- */

/* Whether x is a pointer (an array or a function decays to one). */
#define TDL__CK_ISPTR(x) (__builtin_classify_type(x) == 5)
/* Whether x is a null pointer constant: NULL, 0 (C23: nullptr).  The
 * conditional has the type of its other operand only when x is one. */
#if __STDC_VERSION__ >= 202311L
#define TDL__CK_NULLPTR_T __typeof__(nullptr): (void *)0,
#else
#define TDL__CK_NULLPTR_T
#endif
#define TDL__CK_NULL(x)                                                                                              \
  _Generic((1 ? _Generic((x), void *: (x), int: (void *)(__INTPTR_TYPE__)TDL__CK_INT(x), TDL__CK_NULLPTR_T default:  \
                             (void *)1)                                                                            \
              : (int *)0),                                                                                         \
           int *: 1, default: 0)
/* x when it is an int, else 0: what is cast above is never a call of
 * another type (-Wbad-function-cast). */
#define TDL__CK_INT(x) _Generic((x), int: (x), default: 0)
/* Whether x points to what a T points to (qualifiers aside); x a void *
 * or not a pointer: no (without dereferencing it). */
#define TDL__CK_VOIDP(x) \
  _Generic((x), void *: 1, const void *: 1, volatile void *: 1, const volatile void *: 1, default: 0)
#define TDL__CK_OBJP(x) (TDL__CK_ISPTR(x) && !TDL__CK_VOIDP(x))
#define TDL__CK_SAME(x, T)                                                                                             \
  (TDL__CK_OBJP(x) &&                                                                                                  \
   __builtin_types_compatible_p(__typeof__(*__builtin_choose_expr(TDL__CK_OBJP(x), (x), (T)0)), __typeof__(*(T)0)))

#define TDL__NUM(x, ...) (!TDL__CK_ISPTR(x))
#define TDL__NUM_MSG(...) "is a number, and was given a pointer"
#define TDL__DATA(x, ...) (TDL__CK_NULL(x) || TDL__CK_ISPTR(x))
#define TDL__DATA_MSG(...) "is a pointer, and was given a number"
#define TDL__PTR(x, T, ...) (TDL__CK_NULL(x) || (TDL__CK_ISPTR(x) && TDL__CK_VOIDP(x)) || TDL__CK_SAME(x, T))
#define TDL__PTR_MSG(T, ...) "must be a " #T " (or a void *, or NULL)"
#define TDL__OPT(x, T, ...) (TDL__CK_NULL(x) || TDL__CK_SAME(x, T))
#define TDL__OPT_MSG(T, ...) "must be a " #T " or NULL"
#define TDL__FN(x, T, ...) (TDL__CK_NULL(x) || _Generic((x), T: 1, default: 0))
#define TDL__FN_MSG(T, ...) "must be a " #T " (or NULL)"
#define TDL__NOT(x, T, ...) (TDL__DATA(x, ~) && !_Generic((x), T: 1, default: 0))
#define TDL__NOT_MSG(T, ...) "is a data pointer, never a " #T

/* ---- the call ---- */

#define TDL__CK_CAT(a, b) TDL__CK_CAT_(a, b)
#define TDL__CK_CAT_(a, b) a##b
#define TDL__CK_UNPACK(...) __VA_ARGS__
/* A compile-time check inside an expression: a statement expression, which
 * a call is always inside a function to hold (not sizeof(struct {...}) nor
 * an enumerator, where clang takes a compound literal among the arguments
 * for one at file scope, whose members must be constants). */
#define TDL__CK_ASSERT(c, msg) (__extension__({ _Static_assert(c, msg); }))
/* The check of argument a against its slot ("name", KIND, T), then a comma. */
#define TDL__CK_SLOT(f, s, a) TDL__CK_SLOT_(f, a, TDL__CK_UNPACK s, ~)
#define TDL__CK_SLOT_(...) TDL__CK_SLOT__(__VA_ARGS__)
#define TDL__CK_SLOT__(f, a, name, kind, ...)                                                                        \
  TDL__CK_ASSERT(kind(a, __VA_ARGS__),                                                                              \
                 #f ": argument '" name "' " kind##_MSG(__VA_ARGS__) "; were two arguments swapped?"),

/* M, E or L: whether the preprocessor cut the arguments into more pieces
 * than n, n, or fewer (the 65th of the pieces followed by this list). */
#define TDL__CK_65(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, a17, a18, a19, a20, a21, \
  a22, a23, a24, a25, a26, a27, a28, a29, a30, a31, a32, a33, a34, a35, a36, a37, a38, a39, a40, a41, a42, a43, a44, \
  a45, a46, a47, a48, a49, a50, a51, a52, a53, a54, a55, a56, a57, a58, a59, a60, a61, a62, a63, a64, x, ...) x
#define TDL__CK_CMP2(...) TDL__CK_65(__VA_ARGS__, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, \
  M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, \
  M, M, E, L, ~)
#define TDL__CK_CMP3(...) TDL__CK_65(__VA_ARGS__, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, \
  M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, \
  M, E, L, L, ~)
#define TDL__CK_CMP4(...) TDL__CK_65(__VA_ARGS__, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, \
  M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, \
  E, L, L, L, ~)
#define TDL__CK_CMP5(...) TDL__CK_65(__VA_ARGS__, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, \
  M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, E, \
  L, L, L, L, ~)
#define TDL__CK_CMP6(...) TDL__CK_65(__VA_ARGS__, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, \
  M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, E, L, \
  L, L, L, L, ~)
#define TDL__CK_CMP7(...) TDL__CK_65(__VA_ARGS__, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, \
  M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, E, L, L, \
  L, L, L, L, ~)

/* Slot k of a parenthesized list of slots. */
#define TDL__CK_GET1(s1, ...) s1
#define TDL__CK_GET2(s1, s2, ...) s2
#define TDL__CK_GET3(s1, s2, s3, ...) s3
#define TDL__CK_GET4(s1, s2, s3, s4, ...) s4
#define TDL__CK_GET5(s1, s2, s3, s4, s5, ...) s5
#define TDL__CK_GET6(s1, s2, s3, s4, s5, s6, ...) s6
#define TDL__CK_GET7(s1, s2, s3, s4, s5, s6, s7, ...) s7
/* The checks of the first p pieces (all of which are arguments), then the
 * call with every piece. */
#define TDL__CK_PRE0(f, ss, ...) f(__VA_ARGS__)
#define TDL__CK_PRE1(f, ss, a1, ...) \
  (TDL__CK_SLOT(f, TDL__CK_GET1 ss, a1) f(a1, __VA_ARGS__))
#define TDL__CK_PRE2(f, ss, a1, a2, ...) \
  (TDL__CK_SLOT(f, TDL__CK_GET1 ss, a1) TDL__CK_SLOT(f, TDL__CK_GET2 ss, a2) f(a1, a2, __VA_ARGS__))
#define TDL__CK_PRE3(f, ss, a1, a2, a3, ...) \
  (TDL__CK_SLOT(f, TDL__CK_GET1 ss, a1) TDL__CK_SLOT(f, TDL__CK_GET2 ss, a2) TDL__CK_SLOT(f, TDL__CK_GET3 ss, a3) \
   f(a1, a2, a3, __VA_ARGS__))
#define TDL__CK_PRE4(f, ss, a1, a2, a3, a4, ...) \
  (TDL__CK_SLOT(f, TDL__CK_GET1 ss, a1) TDL__CK_SLOT(f, TDL__CK_GET2 ss, a2) TDL__CK_SLOT(f, TDL__CK_GET3 ss, a3) \
   TDL__CK_SLOT(f, TDL__CK_GET4 ss, a4) f(a1, a2, a3, a4, __VA_ARGS__))
#define TDL__CK_PRE5(f, ss, a1, a2, a3, a4, a5, ...) \
  (TDL__CK_SLOT(f, TDL__CK_GET1 ss, a1) TDL__CK_SLOT(f, TDL__CK_GET2 ss, a2) TDL__CK_SLOT(f, TDL__CK_GET3 ss, a3) \
   TDL__CK_SLOT(f, TDL__CK_GET4 ss, a4) TDL__CK_SLOT(f, TDL__CK_GET5 ss, a5) f(a1, a2, a3, a4, a5, __VA_ARGS__))
#define TDL__CK_PRE6(f, ss, a1, a2, a3, a4, a5, a6, ...) \
  (TDL__CK_SLOT(f, TDL__CK_GET1 ss, a1) TDL__CK_SLOT(f, TDL__CK_GET2 ss, a2) TDL__CK_SLOT(f, TDL__CK_GET3 ss, a3) \
   TDL__CK_SLOT(f, TDL__CK_GET4 ss, a4) TDL__CK_SLOT(f, TDL__CK_GET5 ss, a5) TDL__CK_SLOT(f, TDL__CK_GET6 ss, a6) \
   f(a1, a2, a3, a4, a5, a6, __VA_ARGS__))
/* f's call with its n slots s1..sn, p of them checked when the pieces
 * are more than n. */
#define TDL__CK_CALL2(f, p, s1, s2, ...) \
  TDL__CK_CAT(TDL__CK_CALL2_, TDL__CK_CMP2(__VA_ARGS__))(f, p, s1, s2, __VA_ARGS__)
#define TDL__CK_CALL2_E(f, p, s1, s2, a1, a2) \
  (TDL__CK_SLOT(f, s1, a1) TDL__CK_SLOT(f, s2, a2) f(a1, a2))
#define TDL__CK_CALL2_L(f, p, s1, s2, ...) f(__VA_ARGS__)
#define TDL__CK_CALL2_M(f, p, s1, s2, ...) TDL__CK_CAT(TDL__CK_PRE, p)(f, (s1, s2), __VA_ARGS__)
#define TDL__CK_CALL3(f, p, s1, s2, s3, ...) \
  TDL__CK_CAT(TDL__CK_CALL3_, TDL__CK_CMP3(__VA_ARGS__))(f, p, s1, s2, s3, __VA_ARGS__)
#define TDL__CK_CALL3_E(f, p, s1, s2, s3, a1, a2, a3) \
  (TDL__CK_SLOT(f, s1, a1) TDL__CK_SLOT(f, s2, a2) TDL__CK_SLOT(f, s3, a3) f(a1, a2, a3))
#define TDL__CK_CALL3_L(f, p, s1, s2, s3, ...) f(__VA_ARGS__)
#define TDL__CK_CALL3_M(f, p, s1, s2, s3, ...) TDL__CK_CAT(TDL__CK_PRE, p)(f, (s1, s2, s3), __VA_ARGS__)
#define TDL__CK_CALL4(f, p, s1, s2, s3, s4, ...) \
  TDL__CK_CAT(TDL__CK_CALL4_, TDL__CK_CMP4(__VA_ARGS__))(f, p, s1, s2, s3, s4, __VA_ARGS__)
#define TDL__CK_CALL4_E(f, p, s1, s2, s3, s4, a1, a2, a3, a4) \
  (TDL__CK_SLOT(f, s1, a1) TDL__CK_SLOT(f, s2, a2) TDL__CK_SLOT(f, s3, a3) TDL__CK_SLOT(f, s4, a4) f(a1, a2, a3, a4))
#define TDL__CK_CALL4_L(f, p, s1, s2, s3, s4, ...) f(__VA_ARGS__)
#define TDL__CK_CALL4_M(f, p, s1, s2, s3, s4, ...) TDL__CK_CAT(TDL__CK_PRE, p)(f, (s1, s2, s3, s4), __VA_ARGS__)
#define TDL__CK_CALL5(f, p, s1, s2, s3, s4, s5, ...) \
  TDL__CK_CAT(TDL__CK_CALL5_, TDL__CK_CMP5(__VA_ARGS__))(f, p, s1, s2, s3, s4, s5, __VA_ARGS__)
#define TDL__CK_CALL5_E(f, p, s1, s2, s3, s4, s5, a1, a2, a3, a4, a5) \
  (TDL__CK_SLOT(f, s1, a1) TDL__CK_SLOT(f, s2, a2) TDL__CK_SLOT(f, s3, a3) TDL__CK_SLOT(f, s4, a4) \
   TDL__CK_SLOT(f, s5, a5) f(a1, a2, a3, a4, a5))
#define TDL__CK_CALL5_L(f, p, s1, s2, s3, s4, s5, ...) f(__VA_ARGS__)
#define TDL__CK_CALL5_M(f, p, s1, s2, s3, s4, s5, ...) \
  TDL__CK_CAT(TDL__CK_PRE, p)(f, (s1, s2, s3, s4, s5), __VA_ARGS__)
#define TDL__CK_CALL6(f, p, s1, s2, s3, s4, s5, s6, ...) \
  TDL__CK_CAT(TDL__CK_CALL6_, TDL__CK_CMP6(__VA_ARGS__))(f, p, s1, s2, s3, s4, s5, s6, __VA_ARGS__)
#define TDL__CK_CALL6_E(f, p, s1, s2, s3, s4, s5, s6, a1, a2, a3, a4, a5, a6) \
  (TDL__CK_SLOT(f, s1, a1) TDL__CK_SLOT(f, s2, a2) TDL__CK_SLOT(f, s3, a3) TDL__CK_SLOT(f, s4, a4) \
   TDL__CK_SLOT(f, s5, a5) TDL__CK_SLOT(f, s6, a6) f(a1, a2, a3, a4, a5, a6))
#define TDL__CK_CALL6_L(f, p, s1, s2, s3, s4, s5, s6, ...) f(__VA_ARGS__)
#define TDL__CK_CALL6_M(f, p, s1, s2, s3, s4, s5, s6, ...) \
  TDL__CK_CAT(TDL__CK_PRE, p)(f, (s1, s2, s3, s4, s5, s6), __VA_ARGS__)
#define TDL__CK_CALL7(f, p, s1, s2, s3, s4, s5, s6, s7, ...) \
  TDL__CK_CAT(TDL__CK_CALL7_, TDL__CK_CMP7(__VA_ARGS__))(f, p, s1, s2, s3, s4, s5, s6, s7, __VA_ARGS__)
#define TDL__CK_CALL7_E(f, p, s1, s2, s3, s4, s5, s6, s7, a1, a2, a3, a4, a5, a6, a7) \
  (TDL__CK_SLOT(f, s1, a1) TDL__CK_SLOT(f, s2, a2) TDL__CK_SLOT(f, s3, a3) TDL__CK_SLOT(f, s4, a4) \
   TDL__CK_SLOT(f, s5, a5) TDL__CK_SLOT(f, s6, a6) TDL__CK_SLOT(f, s7, a7) f(a1, a2, a3, a4, a5, a6, a7))
#define TDL__CK_CALL7_L(f, p, s1, s2, s3, s4, s5, s6, s7, ...) f(__VA_ARGS__)
#define TDL__CK_CALL7_M(f, p, s1, s2, s3, s4, s5, s6, s7, ...) \
  TDL__CK_CAT(TDL__CK_PRE, p)(f, (s1, s2, s3, s4, s5, s6, s7), __VA_ARGS__)

/* ---- the checked functions: each slot is ("name", what it takes[, T]) ---- */

/* treadle/dns.h */
#define tdl_dns_resolve(...) \
  TDL__CK_CALL6(tdl_dns_resolve, 3, ("host", TDL__DATA), ("service", TDL__DATA), ("family", TDL__NUM), \
                ("out", TDL__PTR, tdl_addr *), ("cap", TDL__NUM), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_dns_dial(...) TDL__CK_CALL2(tdl_dns_dial, 1, ("hostport", TDL__DATA), ("deadline", TDL__NUM), __VA_ARGS__)

/* treadle/fd.h */
#define tdl_read(...) \
  TDL__CK_CALL4(tdl_read, 1, ("fd", TDL__NUM), ("buf", TDL__DATA), ("len", TDL__NUM), ("deadline", TDL__NUM), \
                __VA_ARGS__)
#define tdl_write(...) \
  TDL__CK_CALL4(tdl_write, 1, ("fd", TDL__NUM), ("buf", TDL__DATA), ("len", TDL__NUM), ("deadline", TDL__NUM), \
                __VA_ARGS__)
#define tdl_readv(...) \
  TDL__CK_CALL4(tdl_readv, 1, ("fd", TDL__NUM), ("iov", TDL__PTR, const struct iovec *), ("iovcnt", TDL__NUM), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_writev(...) \
  TDL__CK_CALL4(tdl_writev, 1, ("fd", TDL__NUM), ("iov", TDL__PTR, const struct iovec *), ("iovcnt", TDL__NUM), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_recv(...) \
  TDL__CK_CALL5(tdl_recv, 1, ("fd", TDL__NUM), ("buf", TDL__DATA), ("len", TDL__NUM), ("flags", TDL__NUM), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_send(...) \
  TDL__CK_CALL5(tdl_send, 1, ("fd", TDL__NUM), ("buf", TDL__DATA), ("len", TDL__NUM), ("flags", TDL__NUM), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_recvfrom(...) \
  TDL__CK_CALL7(tdl_recvfrom, 1, ("fd", TDL__NUM), ("buf", TDL__DATA), ("len", TDL__NUM), ("flags", TDL__NUM), \
                ("addr", TDL__PTR, struct sockaddr *), ("addrlen", TDL__PTR, socklen_t *), ("deadline", TDL__NUM), \
                __VA_ARGS__)
#define tdl_sendto(...) \
  TDL__CK_CALL7(tdl_sendto, 1, ("fd", TDL__NUM), ("buf", TDL__DATA), ("len", TDL__NUM), ("flags", TDL__NUM), \
                ("addr", TDL__PTR, const struct sockaddr *), ("addrlen", TDL__NUM), ("deadline", TDL__NUM), \
                __VA_ARGS__)

/* treadle/fiber.h */
#define tdl_fiber_spawn(...) \
  TDL__CK_CALL5(tdl_fiber_spawn, 3, ("out", TDL__PTR, tdl_fiber_t *), ("loop", TDL__PTR, tdl_loop *), \
                ("fn", TDL__FN, tdl_fiber_fn), ("arg", TDL__NOT, tdl_fiber_fn), \
                ("opts", TDL__OPT, const tdl_fiber_options *), __VA_ARGS__)
#define tdl_fiber_join(...) \
  TDL__CK_CALL3(tdl_fiber_join, 2, ("f", TDL__NUM), ("result", TDL__PTR, void **), ("deadline", TDL__NUM), \
                __VA_ARGS__)
#define tdl_fiber_detach(...) \
  TDL__CK_CALL2(tdl_fiber_detach, 1, ("loop", TDL__PTR, tdl_loop *), ("f", TDL__NUM), __VA_ARGS__)
#define tdl_fiber_cancel(...) \
  TDL__CK_CALL2(tdl_fiber_cancel, 1, ("loop", TDL__PTR, tdl_loop *), ("f", TDL__NUM), __VA_ARGS__)
#define tdl_fiber_unpark(...) \
  TDL__CK_CALL2(tdl_fiber_unpark, 1, ("loop", TDL__PTR, tdl_loop *), ("f", TDL__NUM), __VA_ARGS__)
#define tdl_fiber_compacted(...) \
  TDL__CK_CALL2(tdl_fiber_compacted, 1, ("loop", TDL__PTR, tdl_loop *), ("f", TDL__NUM), __VA_ARGS__)
#define tdl_fiber_main(...) \
  TDL__CK_CALL3(tdl_fiber_main, 1, ("fn", TDL__FN, tdl_fiber_fn), ("arg", TDL__NOT, tdl_fiber_fn), \
                ("result", TDL__PTR, void **), __VA_ARGS__)
#define tdl_fls_key_new(...) \
  TDL__CK_CALL2(tdl_fls_key_new, 1, ("key", TDL__PTR, tdl_fls_key_t *), ("dtor", TDL__FN, void (*)(void *)), \
                __VA_ARGS__)
#define tdl_fls_set(...) TDL__CK_CALL2(tdl_fls_set, 1, ("key", TDL__NUM), ("value", TDL__DATA), __VA_ARGS__)
#define tdl_fiber_foreach(...) \
  TDL__CK_CALL3(tdl_fiber_foreach, 2, ("loop", TDL__PTR, tdl_loop *), \
                ("fn", TDL__FN, int (*)(const tdl_fiber_info *, void *)), \
                ("ctx", TDL__NOT, int (*)(const tdl_fiber_info *, void *)), __VA_ARGS__)
#define tdl_fiber_dump(...) \
  TDL__CK_CALL2(tdl_fiber_dump, 1, ("loop", TDL__PTR, tdl_loop *), ("fd", TDL__NUM), __VA_ARGS__)
#define tdl_fiber_stats_get(...) \
  TDL__CK_CALL2(tdl_fiber_stats_get, 1, ("loop", TDL__PTR, tdl_loop *), ("out", TDL__PTR, tdl_fiber_stats *), \
                __VA_ARGS__)
#define tdl_fiber_compact_idle(...) \
  TDL__CK_CALL2(tdl_fiber_compact_idle, 1, ("loop", TDL__PTR, tdl_loop *), ("threshold", TDL__NUM), __VA_ARGS__)

/* treadle/fs.h */
#define tdl_fs_open(...) \
  TDL__CK_CALL4(tdl_fs_open, 3, ("path", TDL__DATA), ("flags", TDL__NUM), ("mode", TDL__NUM), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_fs_openat(...) \
  TDL__CK_CALL5(tdl_fs_openat, 4, ("dirfd", TDL__NUM), ("path", TDL__DATA), ("flags", TDL__NUM), ("mode", TDL__NUM), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_fs_read(...) \
  TDL__CK_CALL4(tdl_fs_read, 1, ("fd", TDL__NUM), ("buf", TDL__DATA), ("n", TDL__NUM), ("deadline", TDL__NUM), \
                __VA_ARGS__)
#define tdl_fs_write(...) \
  TDL__CK_CALL4(tdl_fs_write, 1, ("fd", TDL__NUM), ("buf", TDL__DATA), ("n", TDL__NUM), ("deadline", TDL__NUM), \
                __VA_ARGS__)
#define tdl_fs_pread(...) \
  TDL__CK_CALL5(tdl_fs_pread, 1, ("fd", TDL__NUM), ("buf", TDL__DATA), ("n", TDL__NUM), ("off", TDL__NUM), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_fs_pwrite(...) \
  TDL__CK_CALL5(tdl_fs_pwrite, 1, ("fd", TDL__NUM), ("buf", TDL__DATA), ("n", TDL__NUM), ("off", TDL__NUM), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_fs_preadv(...) \
  TDL__CK_CALL5(tdl_fs_preadv, 1, ("fd", TDL__NUM), ("iov", TDL__PTR, const struct iovec *), ("iovcnt", TDL__NUM), \
                ("off", TDL__NUM), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_fs_pwritev(...) \
  TDL__CK_CALL5(tdl_fs_pwritev, 1, ("fd", TDL__NUM), ("iov", TDL__PTR, const struct iovec *), ("iovcnt", TDL__NUM), \
                ("off", TDL__NUM), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_fs_stat(...) \
  TDL__CK_CALL3(tdl_fs_stat, 2, ("path", TDL__DATA), ("st", TDL__PTR, struct stat *), ("deadline", TDL__NUM), \
                __VA_ARGS__)
#define tdl_fs_lstat(...) \
  TDL__CK_CALL3(tdl_fs_lstat, 2, ("path", TDL__DATA), ("st", TDL__PTR, struct stat *), ("deadline", TDL__NUM), \
                __VA_ARGS__)
#define tdl_fs_fstatat(...) \
  TDL__CK_CALL5(tdl_fs_fstatat, 3, ("dirfd", TDL__NUM), ("path", TDL__DATA), ("st", TDL__PTR, struct stat *), \
                ("flags", TDL__NUM), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_fs_statx(...) \
  TDL__CK_CALL6(tdl_fs_statx, 5, ("dirfd", TDL__NUM), ("path", TDL__DATA), ("flags", TDL__NUM), ("mask", TDL__NUM), \
                ("stx", TDL__PTR, struct statx *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_fs_readdir(...) \
  TDL__CK_CALL4(tdl_fs_readdir, 1, ("fd", TDL__NUM), ("entries", TDL__PTR, tdl_fs_dirent *), ("n", TDL__NUM), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_fs_fstat(...) \
  TDL__CK_CALL2(tdl_fs_fstat, 1, ("fd", TDL__NUM), ("st", TDL__PTR, struct stat *), __VA_ARGS__)
#define tdl_fs_unlink(...) TDL__CK_CALL2(tdl_fs_unlink, 1, ("path", TDL__DATA), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_fs_rmdir(...) TDL__CK_CALL2(tdl_fs_rmdir, 1, ("path", TDL__DATA), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_fs_rename(...) \
  TDL__CK_CALL3(tdl_fs_rename, 2, ("from", TDL__DATA), ("to", TDL__DATA), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_fs_mkdir(...) \
  TDL__CK_CALL3(tdl_fs_mkdir, 2, ("path", TDL__DATA), ("mode", TDL__NUM), ("deadline", TDL__NUM), __VA_ARGS__)

/* treadle/group.h */
#define tdl_group_new(...) \
  TDL__CK_CALL2(tdl_group_new, 1, ("out", TDL__PTR, tdl_group **), ("opts", TDL__OPT, const tdl_group_options *), \
                __VA_ARGS__)
#define tdl_group_port(...) \
  TDL__CK_CALL2(tdl_group_port, 1, ("g", TDL__PTR, tdl_group *), ("i", TDL__NUM), __VA_ARGS__)
#define tdl_group_loop(...) \
  TDL__CK_CALL2(tdl_group_loop, 1, ("g", TDL__PTR, tdl_group *), ("i", TDL__NUM), __VA_ARGS__)
#define tdl_group_wait(...) \
  TDL__CK_CALL2(tdl_group_wait, 1, ("g", TDL__PTR, tdl_group *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_port_call(...) \
  TDL__CK_CALL5(tdl_port_call, 2, ("port", TDL__PTR, tdl_port *), ("fn", TDL__FN, void *(*)(tdl_loop *, void *)), \
                ("arg", TDL__NOT, void *(*)(tdl_loop *, void *)), ("result", TDL__PTR, void **), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_port_spawn(...) \
  TDL__CK_CALL5(tdl_port_spawn, 2, ("port", TDL__PTR, tdl_port *), ("fn", TDL__FN, tdl_fiber_fn), \
                ("arg", TDL__NOT, tdl_fiber_fn), ("opts", TDL__OPT, const tdl_fiber_options *), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_group_spawn(...) \
  TDL__CK_CALL6(tdl_group_spawn, 3, ("out", TDL__PTR, tdl_group_fiber **), ("g", TDL__PTR, tdl_group *), \
                ("fn", TDL__FN, tdl_fiber_fn), ("arg", TDL__NOT, tdl_fiber_fn), \
                ("opts", TDL__OPT, const tdl_fiber_options *), ("flags", TDL__NUM), __VA_ARGS__)
#define tdl_group_fiber_join(...) \
  TDL__CK_CALL3(tdl_group_fiber_join, 2, ("gf", TDL__PTR, tdl_group_fiber *), ("result", TDL__PTR, void **), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_group_set_placement(...) \
  TDL__CK_CALL2(tdl_group_set_placement, 1, ("g", TDL__PTR, tdl_group *), ("placement", TDL__NUM), __VA_ARGS__)
#define tdl_group_set_stealing(...) \
  TDL__CK_CALL2(tdl_group_set_stealing, 1, ("g", TDL__PTR, tdl_group *), ("on", TDL__NUM), __VA_ARGS__)
#define tdl_acceptor_new(...) \
  TDL__CK_CALL2(tdl_acceptor_new, 1, ("out", TDL__PTR, tdl_acceptor **), \
                ("opts", TDL__OPT, const tdl_acceptor_options *), __VA_ARGS__)
#define tdl_acceptor_local_addr(...) \
  TDL__CK_CALL2(tdl_acceptor_local_addr, 1, ("a", TDL__PTR, const tdl_acceptor *), ("out", TDL__PTR, tdl_addr *), \
                __VA_ARGS__)
#define tdl_acceptor_serve(...) \
  TDL__CK_CALL2(tdl_acceptor_serve, 1, ("a", TDL__PTR, tdl_acceptor *), ("index", TDL__NUM), __VA_ARGS__)
#define tdl_acceptor_stats_get(...) \
  TDL__CK_CALL3(tdl_acceptor_stats_get, 2, ("a", TDL__PTR, const tdl_acceptor *), ("index", TDL__NUM), \
                ("out", TDL__PTR, tdl_acceptor_stats *), __VA_ARGS__)

/* treadle/loop.h */
#define tdl_loop_new(...) \
  TDL__CK_CALL2(tdl_loop_new, 1, ("out", TDL__PTR, tdl_loop **), ("opts", TDL__OPT, const tdl_loop_options *), \
                __VA_ARGS__)
#define tdl_loop_run(...) \
  TDL__CK_CALL2(tdl_loop_run, 1, ("loop", TDL__PTR, tdl_loop *), ("mode", TDL__NUM), __VA_ARGS__)
#define tdl_io_init(...) \
  TDL__CK_CALL4(tdl_io_init, 3, ("w", TDL__PTR, tdl_io *), ("fd", TDL__NUM), ("cb", TDL__FN, tdl_io_cb), \
                ("data", TDL__NOT, tdl_io_cb), __VA_ARGS__)
#define tdl_io_start(...) \
  TDL__CK_CALL3(tdl_io_start, 2, ("loop", TDL__PTR, tdl_loop *), ("w", TDL__PTR, tdl_io *), ("events", TDL__NUM), \
                __VA_ARGS__)
#define tdl_io_blocked(...) \
  TDL__CK_CALL3(tdl_io_blocked, 2, ("loop", TDL__PTR, tdl_loop *), ("w", TDL__PTR, tdl_io *), ("events", TDL__NUM), \
                __VA_ARGS__)
#define tdl_io_feed(...) \
  TDL__CK_CALL3(tdl_io_feed, 2, ("loop", TDL__PTR, tdl_loop *), ("w", TDL__PTR, tdl_io *), ("events", TDL__NUM), \
                __VA_ARGS__)
#define tdl_io_stop(...) \
  TDL__CK_CALL2(tdl_io_stop, 1, ("loop", TDL__PTR, tdl_loop *), ("w", TDL__PTR, tdl_io *), __VA_ARGS__)
#define tdl_timer_init(...) \
  TDL__CK_CALL3(tdl_timer_init, 2, ("t", TDL__PTR, tdl_timer *), ("cb", TDL__FN, tdl_timer_cb), \
                ("data", TDL__NOT, tdl_timer_cb), __VA_ARGS__)
#define tdl_wakeup_init(...) \
  TDL__CK_CALL3(tdl_wakeup_init, 2, ("wk", TDL__PTR, tdl_wakeup *), ("cb", TDL__FN, tdl_wakeup_cb), \
                ("data", TDL__NOT, tdl_wakeup_cb), __VA_ARGS__)
#define tdl_post_init(...) \
  TDL__CK_CALL3(tdl_post_init, 2, ("p", TDL__PTR, tdl_post *), ("cb", TDL__FN, tdl_post_cb), \
                ("data", TDL__NOT, tdl_post_cb), __VA_ARGS__)
#define tdl_signal_init(...) \
  TDL__CK_CALL3(tdl_signal_init, 2, ("s", TDL__PTR, tdl_signal *), ("cb", TDL__FN, tdl_signal_cb), \
                ("data", TDL__NOT, tdl_signal_cb), __VA_ARGS__)
#define tdl_defer_init(...) \
  TDL__CK_CALL3(tdl_defer_init, 2, ("d", TDL__PTR, tdl_defer *), ("cb", TDL__FN, tdl_defer_cb), \
                ("data", TDL__NOT, tdl_defer_cb), __VA_ARGS__)
#define tdl_observer_init(...) \
  TDL__CK_CALL3(tdl_observer_init, 2, ("o", TDL__PTR, tdl_observer *), ("cb", TDL__FN, tdl_observer_cb), \
                ("data", TDL__NOT, tdl_observer_cb), __VA_ARGS__)
#define tdl_timer_start_at(...) \
  TDL__CK_CALL4(tdl_timer_start_at, 3, ("loop", TDL__PTR, tdl_loop *), ("t", TDL__PTR, tdl_timer *), \
                ("deadline", TDL__NUM), ("repeat", TDL__NUM), __VA_ARGS__)
#define tdl_timer_start(...) \
  TDL__CK_CALL4(tdl_timer_start, 3, ("loop", TDL__PTR, tdl_loop *), ("t", TDL__PTR, tdl_timer *), \
                ("delay", TDL__NUM), ("repeat", TDL__NUM), __VA_ARGS__)
#define tdl_timer_stop(...) \
  TDL__CK_CALL2(tdl_timer_stop, 1, ("loop", TDL__PTR, tdl_loop *), ("t", TDL__PTR, tdl_timer *), __VA_ARGS__)
#define tdl_wakeup_start(...) \
  TDL__CK_CALL2(tdl_wakeup_start, 1, ("loop", TDL__PTR, tdl_loop *), ("wk", TDL__PTR, tdl_wakeup *), __VA_ARGS__)
#define tdl_wakeup_stop(...) \
  TDL__CK_CALL2(tdl_wakeup_stop, 1, ("loop", TDL__PTR, tdl_loop *), ("wk", TDL__PTR, tdl_wakeup *), __VA_ARGS__)
#define tdl_loop_port(...) \
  TDL__CK_CALL2(tdl_loop_port, 1, ("out", TDL__PTR, tdl_port **), ("loop", TDL__PTR, tdl_loop *), __VA_ARGS__)
#define tdl_port_post(...) \
  TDL__CK_CALL2(tdl_port_post, 1, ("port", TDL__PTR, tdl_port *), ("p", TDL__PTR, tdl_post *), __VA_ARGS__)
#define tdl_port_stats_get(...) \
  TDL__CK_CALL2(tdl_port_stats_get, 1, ("port", TDL__PTR, const tdl_port *), ("out", TDL__PTR, tdl_port_stats *), \
                __VA_ARGS__)
#define tdl_signal_start(...) \
  TDL__CK_CALL3(tdl_signal_start, 2, ("loop", TDL__PTR, tdl_loop *), ("s", TDL__PTR, tdl_signal *), \
                ("signum", TDL__NUM), __VA_ARGS__)
#define tdl_signal_stop(...) \
  TDL__CK_CALL2(tdl_signal_stop, 1, ("loop", TDL__PTR, tdl_loop *), ("s", TDL__PTR, tdl_signal *), __VA_ARGS__)
#define tdl_defer_queue(...) \
  TDL__CK_CALL2(tdl_defer_queue, 1, ("loop", TDL__PTR, tdl_loop *), ("d", TDL__PTR, tdl_defer *), __VA_ARGS__)
#define tdl_defer_cancel(...) \
  TDL__CK_CALL2(tdl_defer_cancel, 1, ("loop", TDL__PTR, tdl_loop *), ("d", TDL__PTR, tdl_defer *), __VA_ARGS__)
#define tdl_observer_start(...) \
  TDL__CK_CALL3(tdl_observer_start, 2, ("loop", TDL__PTR, tdl_loop *), ("o", TDL__PTR, tdl_observer *), \
                ("kind", TDL__NUM), __VA_ARGS__)
#define tdl_observer_stop(...) \
  TDL__CK_CALL2(tdl_observer_stop, 1, ("loop", TDL__PTR, tdl_loop *), ("o", TDL__PTR, tdl_observer *), __VA_ARGS__)
#define tdl_watchdog_start(...) \
  TDL__CK_CALL2(tdl_watchdog_start, 1, ("loop", TDL__PTR, tdl_loop *), \
                ("opts", TDL__OPT, const tdl_watchdog_options *), __VA_ARGS__)
#define tdl_op_init(...) TDL__CK_CALL2(tdl_op_init, 1, ("op", TDL__PTR, tdl_op *), ("data", TDL__DATA), __VA_ARGS__)
#define tdl_op_read(...) \
  TDL__CK_CALL6(tdl_op_read, 3, ("loop", TDL__PTR, tdl_loop *), ("op", TDL__PTR, tdl_op *), ("fd", TDL__NUM), \
                ("buf", TDL__DATA), ("len", TDL__NUM), ("cb", TDL__FN, tdl_op_cb), __VA_ARGS__)
#define tdl_op_write(...) \
  TDL__CK_CALL6(tdl_op_write, 3, ("loop", TDL__PTR, tdl_loop *), ("op", TDL__PTR, tdl_op *), ("fd", TDL__NUM), \
                ("buf", TDL__DATA), ("len", TDL__NUM), ("cb", TDL__FN, tdl_op_cb), __VA_ARGS__)
#define tdl_op_cancel(...) \
  TDL__CK_CALL2(tdl_op_cancel, 1, ("loop", TDL__PTR, tdl_loop *), ("op", TDL__PTR, tdl_op *), __VA_ARGS__)

/* treadle/metrics.h */
#define tdl_metrics_loop(...) \
  TDL__CK_CALL2(tdl_metrics_loop, 1, ("loop", TDL__PTR, tdl_loop *), ("out", TDL__PTR, tdl_loop_metrics *), \
                __VA_ARGS__)
#define tdl_metrics_group(...) \
  TDL__CK_CALL4(tdl_metrics_group, 2, ("g", TDL__PTR, tdl_group *), ("i", TDL__NUM), \
                ("out", TDL__PTR, tdl_loop_metrics *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_metrics_write_prometheus(...) \
  TDL__CK_CALL5(tdl_metrics_write_prometheus, 2, ("buf", TDL__DATA), ("cap", TDL__NUM), \
                ("p", TDL__PTR, const tdl_process_metrics *), ("loops", TDL__PTR, const tdl_loop_metrics *), \
                ("n", TDL__NUM), __VA_ARGS__)

/* treadle/net.h */
#define tdl_addr_parse(...) \
  TDL__CK_CALL2(tdl_addr_parse, 1, ("a", TDL__PTR, tdl_addr *), ("s", TDL__DATA), __VA_ARGS__)
#define tdl_addr_parse_error(...) \
  TDL__CK_CALL3(tdl_addr_parse_error, 2, ("s", TDL__DATA), ("buf", TDL__DATA), ("cap", TDL__NUM), __VA_ARGS__)
#define tdl_addr_format(...) \
  TDL__CK_CALL3(tdl_addr_format, 1, ("a", TDL__PTR, const tdl_addr *), ("buf", TDL__DATA), ("cap", TDL__NUM), \
                __VA_ARGS__)
#define tdl_addr_from_sockaddr(...) \
  TDL__CK_CALL3(tdl_addr_from_sockaddr, 1, ("a", TDL__PTR, tdl_addr *), ("sa", TDL__PTR, const struct sockaddr *), \
                ("len", TDL__NUM), __VA_ARGS__)
#define tdl_net_local_addr(...) \
  TDL__CK_CALL2(tdl_net_local_addr, 1, ("fd", TDL__NUM), ("out", TDL__PTR, tdl_addr *), __VA_ARGS__)
#define tdl_net_peer_addr(...) \
  TDL__CK_CALL2(tdl_net_peer_addr, 1, ("fd", TDL__NUM), ("out", TDL__PTR, tdl_addr *), __VA_ARGS__)
#define tdl_net_listen(...) \
  TDL__CK_CALL3(tdl_net_listen, 0, ("a", TDL__PTR, const tdl_addr *), ("backlog", TDL__NUM), ("flags", TDL__NUM), \
                __VA_ARGS__)
#define tdl_net_listen_str(...) \
  TDL__CK_CALL3(tdl_net_listen_str, 2, ("s", TDL__DATA), ("backlog", TDL__NUM), ("flags", TDL__NUM), __VA_ARGS__)
#define tdl_net_accept(...) \
  TDL__CK_CALL3(tdl_net_accept, 2, ("lfd", TDL__NUM), ("peer", TDL__PTR, tdl_addr *), ("deadline", TDL__NUM), \
                __VA_ARGS__)
#define tdl_net_connect(...) \
  TDL__CK_CALL2(tdl_net_connect, 0, ("a", TDL__PTR, const tdl_addr *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_net_send_all(...) \
  TDL__CK_CALL5(tdl_net_send_all, 1, ("fd", TDL__NUM), ("buf", TDL__DATA), ("len", TDL__NUM), \
                ("sent", TDL__PTR, size_t *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_net_send_allv(...) \
  TDL__CK_CALL5(tdl_net_send_allv, 1, ("fd", TDL__NUM), ("iov", TDL__PTR, const struct iovec *), \
                ("iovcnt", TDL__NUM), ("sent", TDL__PTR, size_t *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_net_recv_exactly(...) \
  TDL__CK_CALL5(tdl_net_recv_exactly, 1, ("fd", TDL__NUM), ("buf", TDL__DATA), ("n", TDL__NUM), \
                ("got", TDL__PTR, size_t *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_net_recv_until(...) \
  TDL__CK_CALL7(tdl_net_recv_until, 1, ("fd", TDL__NUM), ("buf", TDL__DATA), ("cap", TDL__NUM), \
                ("delim", TDL__DATA), ("delim_len", TDL__NUM), ("got", TDL__PTR, size_t *), ("deadline", TDL__NUM), \
                __VA_ARGS__)
#define tdl_reader_init(...) \
  TDL__CK_CALL5(tdl_reader_init, 2, ("r", TDL__PTR, tdl_reader *), ("fd", TDL__NUM), ("mem", TDL__DATA), \
                ("size", TDL__NUM), ("max", TDL__NUM), __VA_ARGS__)
#define tdl_reader_consume(...) \
  TDL__CK_CALL2(tdl_reader_consume, 1, ("r", TDL__PTR, tdl_reader *), ("n", TDL__NUM), __VA_ARGS__)
#define tdl_reader_fill(...) \
  TDL__CK_CALL2(tdl_reader_fill, 1, ("r", TDL__PTR, tdl_reader *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_reader_need(...) \
  TDL__CK_CALL3(tdl_reader_need, 1, ("r", TDL__PTR, tdl_reader *), ("n", TDL__NUM), ("deadline", TDL__NUM), \
                __VA_ARGS__)
#define tdl_reader_until(...) \
  TDL__CK_CALL4(tdl_reader_until, 1, ("r", TDL__PTR, tdl_reader *), ("delim", TDL__NOT, tdl_reader *), \
                ("delim_len", TDL__NUM), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_reader_read(...) \
  TDL__CK_CALL4(tdl_reader_read, 1, ("r", TDL__PTR, tdl_reader *), ("dst", TDL__NOT, tdl_reader *), \
                ("len", TDL__NUM), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_reader_read_exactly(...) \
  TDL__CK_CALL5(tdl_reader_read_exactly, 1, ("r", TDL__PTR, tdl_reader *), ("dst", TDL__NOT, tdl_reader *), \
                ("n", TDL__NUM), ("got", TDL__PTR, size_t *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_writer_init(...) \
  TDL__CK_CALL5(tdl_writer_init, 2, ("w", TDL__PTR, tdl_writer *), ("fd", TDL__NUM), ("mem", TDL__DATA), \
                ("size", TDL__NUM), ("max", TDL__NUM), __VA_ARGS__)
#define tdl_writer_put(...) \
  TDL__CK_CALL3(tdl_writer_put, 1, ("w", TDL__PTR, tdl_writer *), ("p", TDL__NOT, tdl_writer *), ("n", TDL__NUM), \
                __VA_ARGS__)
#define tdl_writer_puts(...) \
  TDL__CK_CALL2(tdl_writer_puts, 1, ("w", TDL__PTR, tdl_writer *), ("s", TDL__DATA), __VA_ARGS__)
#define tdl_writer_put_i64(...) \
  TDL__CK_CALL2(tdl_writer_put_i64, 1, ("w", TDL__PTR, tdl_writer *), ("v", TDL__NUM), __VA_ARGS__)
#define tdl_writer_put_u64(...) \
  TDL__CK_CALL2(tdl_writer_put_u64, 1, ("w", TDL__PTR, tdl_writer *), ("v", TDL__NUM), __VA_ARGS__)
#define tdl_writer_reserve(...) \
  TDL__CK_CALL3(tdl_writer_reserve, 2, ("w", TDL__PTR, tdl_writer *), ("n", TDL__NUM), ("room", TDL__PTR, void **), \
                __VA_ARGS__)
#define tdl_writer_commit(...) \
  TDL__CK_CALL2(tdl_writer_commit, 1, ("w", TDL__PTR, tdl_writer *), ("n", TDL__NUM), __VA_ARGS__)
#define tdl_writer_flush(...) \
  TDL__CK_CALL2(tdl_writer_flush, 1, ("w", TDL__PTR, tdl_writer *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_net_transport_set(...) \
  TDL__CK_CALL3(tdl_net_transport_set, 1, ("fd", TDL__NUM), ("t", TDL__PTR, const tdl_net_transport *), \
                ("ctx", TDL__DATA), __VA_ARGS__)
#define tdl_net_udp_bind(...) \
  TDL__CK_CALL2(tdl_net_udp_bind, 0, ("a", TDL__PTR, const tdl_addr *), ("flags", TDL__NUM), __VA_ARGS__)
#define tdl_net_udp_send(...) \
  TDL__CK_CALL5(tdl_net_udp_send, 1, ("fd", TDL__NUM), ("buf", TDL__DATA), ("len", TDL__NUM), \
                ("to", TDL__PTR, const tdl_addr *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_net_udp_recv(...) \
  TDL__CK_CALL5(tdl_net_udp_recv, 1, ("fd", TDL__NUM), ("buf", TDL__DATA), ("len", TDL__NUM), \
                ("from", TDL__PTR, tdl_addr *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_conns_init(...) \
  TDL__CK_CALL3(tdl_conns_init, 2, ("cs", TDL__PTR, tdl_conns *), ("loop", TDL__PTR, tdl_loop *), \
                ("o", TDL__OPT, const tdl_conns_options *), __VA_ARGS__)
#define tdl_conns_admit(...) \
  TDL__CK_CALL3(tdl_conns_admit, 2, ("cs", TDL__PTR, tdl_conns *), ("c", TDL__PTR, tdl_conn *), ("fiber", TDL__NUM), \
                __VA_ARGS__)
#define tdl_conns_evict_idle(...) \
  TDL__CK_CALL2(tdl_conns_evict_idle, 1, ("cs", TDL__PTR, tdl_conns *), ("n", TDL__NUM), __VA_ARGS__)
#define tdl_conns_stats_get(...) \
  TDL__CK_CALL2(tdl_conns_stats_get, 1, ("cs", TDL__PTR, const tdl_conns *), ("out", TDL__PTR, tdl_conns_stats *), \
                __VA_ARGS__)

/* treadle/pool.h */
#define tdl_pool_call(...) \
  TDL__CK_CALL6(tdl_pool_call, 2, ("lane", TDL__NUM), ("fn", TDL__FN, void *(*)(void *)), \
                ("arg", TDL__NOT, void *(*)(void *)), ("drop", TDL__FN, void (*)(void *)), \
                ("result", TDL__PTR, void **), ("deadline", TDL__NUM), __VA_ARGS__)

/* treadle/process.h */
#define tdl_process_spawn(...) \
  TDL__CK_CALL2(tdl_process_spawn, 1, ("p", TDL__PTR, tdl_process *), ("o", TDL__OPT, const tdl_process_options *), \
                __VA_ARGS__)
#define tdl_process_wait(...) \
  TDL__CK_CALL3(tdl_process_wait, 2, ("p", TDL__PTR, tdl_process *), ("status", TDL__PTR, int *), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_process_kill(...) \
  TDL__CK_CALL2(tdl_process_kill, 1, ("p", TDL__PTR, tdl_process *), ("sig", TDL__NUM), __VA_ARGS__)
#define tdl_process_watch(...) \
  TDL__CK_CALL3(tdl_process_watch, 2, ("loop", TDL__PTR, tdl_loop *), ("p", TDL__PTR, tdl_process *), \
                ("cb", TDL__FN, tdl_process_cb), __VA_ARGS__)
#define tdl_process_run(...) \
  TDL__CK_CALL7(tdl_process_run, 1, ("result", TDL__PTR, tdl_process_run_result *), ("argv", TDL__DATA), \
                ("opts", TDL__OPT, const tdl_process_run_options *), ("input", TDL__DATA), ("input_len", TDL__NUM), \
                ("limit", TDL__NUM), ("deadline", TDL__NUM), __VA_ARGS__)

/* treadle/sync.h */
#define tdl_mutex_lock(...) \
  TDL__CK_CALL2(tdl_mutex_lock, 1, ("m", TDL__PTR, tdl_mutex *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_cond_wait(...) \
  TDL__CK_CALL3(tdl_cond_wait, 2, ("c", TDL__PTR, tdl_cond *), ("m", TDL__PTR, tdl_mutex *), ("deadline", TDL__NUM), \
                __VA_ARGS__)
#define tdl_sem_init(...) \
  TDL__CK_CALL3(tdl_sem_init, 1, ("s", TDL__PTR, tdl_sem *), ("value", TDL__NUM), ("max", TDL__NUM), __VA_ARGS__)
#define tdl_sem_init_shared(...) \
  TDL__CK_CALL3(tdl_sem_init_shared, 1, ("s", TDL__PTR, tdl_sem *), ("value", TDL__NUM), ("max", TDL__NUM), \
                __VA_ARGS__)
#define tdl_sem_acquire(...) \
  TDL__CK_CALL2(tdl_sem_acquire, 1, ("s", TDL__PTR, tdl_sem *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_waitgroup_add(...) \
  TDL__CK_CALL2(tdl_waitgroup_add, 1, ("wg", TDL__PTR, tdl_waitgroup *), ("delta", TDL__NUM), __VA_ARGS__)
#define tdl_waitgroup_wait(...) \
  TDL__CK_CALL2(tdl_waitgroup_wait, 1, ("wg", TDL__PTR, tdl_waitgroup *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_once_call(...) \
  TDL__CK_CALL4(tdl_once_call, 2, ("o", TDL__PTR, tdl_once *), ("fn", TDL__FN, int (*)(void *)), \
                ("arg", TDL__NOT, int (*)(void *)), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_chan_new(...) \
  TDL__CK_CALL3(tdl_chan_new, 1, ("out", TDL__PTR, tdl_chan **), ("elem_size", TDL__NUM), ("capacity", TDL__NUM), \
                __VA_ARGS__)
#define tdl_chan_new_shared(...) \
  TDL__CK_CALL3(tdl_chan_new_shared, 1, ("out", TDL__PTR, tdl_chan **), ("elem_size", TDL__NUM), \
                ("capacity", TDL__NUM), __VA_ARGS__)
#define tdl_chan_init(...) \
  TDL__CK_CALL5(tdl_chan_init, 3, ("ch", TDL__PTR, tdl_chan *), ("elem_size", TDL__NUM), ("capacity", TDL__NUM), \
                ("buf", TDL__NOT, tdl_chan *), ("buf_len", TDL__NUM), __VA_ARGS__)
#define tdl_chan_send(...) \
  TDL__CK_CALL3(tdl_chan_send, 1, ("ch", TDL__PTR, tdl_chan *), ("val", TDL__NOT, tdl_chan *), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_chan_recv(...) \
  TDL__CK_CALL3(tdl_chan_recv, 1, ("ch", TDL__PTR, tdl_chan *), ("val", TDL__NOT, tdl_chan *), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_chan_try_send(...) \
  TDL__CK_CALL2(tdl_chan_try_send, 1, ("ch", TDL__PTR, tdl_chan *), ("val", TDL__NOT, tdl_chan *), __VA_ARGS__)
#define tdl_chan_try_recv(...) \
  TDL__CK_CALL2(tdl_chan_try_recv, 1, ("ch", TDL__PTR, tdl_chan *), ("val", TDL__NOT, tdl_chan *), __VA_ARGS__)
#define tdl_select(...) \
  TDL__CK_CALL3(tdl_select, 0, ("ops", TDL__PTR, tdl_select_op *), ("n", TDL__NUM), ("deadline", TDL__NUM), \
                __VA_ARGS__)
#define tdl_try_select(...) \
  TDL__CK_CALL2(tdl_try_select, 0, ("ops", TDL__PTR, tdl_select_op *), ("n", TDL__NUM), __VA_ARGS__)
#define tdl_bcast_new(...) \
  TDL__CK_CALL3(tdl_bcast_new, 1, ("out", TDL__PTR, tdl_bcast **), ("elem_size", TDL__NUM), ("capacity", TDL__NUM), \
                __VA_ARGS__)
#define tdl_bcast_send(...) \
  TDL__CK_CALL2(tdl_bcast_send, 1, ("b", TDL__PTR, tdl_bcast *), ("val", TDL__NOT, tdl_bcast *), __VA_ARGS__)
#define tdl_bcast_subscribe(...) \
  TDL__CK_CALL2(tdl_bcast_subscribe, 1, ("out", TDL__PTR, tdl_bcast_sub **), ("b", TDL__PTR, tdl_bcast *), \
                __VA_ARGS__)
#define tdl_bcast_recv(...) \
  TDL__CK_CALL3(tdl_bcast_recv, 1, ("s", TDL__PTR, tdl_bcast_sub *), ("val", TDL__NOT, tdl_bcast_sub *), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_bcast_try_recv(...) \
  TDL__CK_CALL2(tdl_bcast_try_recv, 1, ("s", TDL__PTR, tdl_bcast_sub *), ("val", TDL__NOT, tdl_bcast_sub *), \
                __VA_ARGS__)

#endif /* the checks */

#endif /* TREADLE_PRIVATE_CHECKS_H */

/* treadle/tls.h, which comes after treadle.h and includes this file again
 * at its end: its functions' macros only once it has declared them. */
#if defined(TDL__ARG_CHECKS) && defined(TREADLE_TLS_H) && !defined(TDL__ARG_CHECKS_TLS)
#define TDL__ARG_CHECKS_TLS 1
#define tdl_tls_config_new(...) \
  TDL__CK_CALL2(tdl_tls_config_new, 1, ("out", TDL__PTR, tdl_tls_config **), \
                ("opts", TDL__OPT, const tdl_tls_options *), __VA_ARGS__)
#define tdl_tls_config_reload(...) \
  TDL__CK_CALL2(tdl_tls_config_reload, 1, ("cfg", TDL__PTR, tdl_tls_config *), \
                ("opts", TDL__OPT, const tdl_tls_options *), __VA_ARGS__)
#define tdl_tls_new(...) \
  TDL__CK_CALL4(tdl_tls_new, 3, ("out", TDL__PTR, tdl_tls **), ("cfg", TDL__PTR, tdl_tls_config *), \
                ("fd", TDL__NUM), ("server_name", TDL__DATA), __VA_ARGS__)
#define tdl_tls_handshake(...) \
  TDL__CK_CALL2(tdl_tls_handshake, 1, ("s", TDL__PTR, tdl_tls *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_tls_wait(...) \
  TDL__CK_CALL2(tdl_tls_wait, 1, ("s", TDL__PTR, tdl_tls *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_tls_shutdown(...) \
  TDL__CK_CALL2(tdl_tls_shutdown, 1, ("s", TDL__PTR, tdl_tls *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_tls_read(...) \
  TDL__CK_CALL4(tdl_tls_read, 1, ("s", TDL__PTR, tdl_tls *), ("buf", TDL__NOT, tdl_tls *), ("len", TDL__NUM), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_tls_write(...) \
  TDL__CK_CALL4(tdl_tls_write, 1, ("s", TDL__PTR, tdl_tls *), ("buf", TDL__NOT, tdl_tls *), ("len", TDL__NUM), \
                ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_tls_writev(...) \
  TDL__CK_CALL4(tdl_tls_writev, 1, ("s", TDL__PTR, tdl_tls *), ("iov", TDL__PTR, const struct iovec *), \
                ("iovcnt", TDL__NUM), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_tls_send_all(...) \
  TDL__CK_CALL5(tdl_tls_send_all, 1, ("s", TDL__PTR, tdl_tls *), ("buf", TDL__NOT, tdl_tls *), ("len", TDL__NUM), \
                ("sent", TDL__PTR, size_t *), ("deadline", TDL__NUM), __VA_ARGS__)
#define tdl_tls_reader_init(...) \
  TDL__CK_CALL5(tdl_tls_reader_init, 2, ("r", TDL__PTR, tdl_reader *), ("s", TDL__PTR, tdl_tls *), \
                ("mem", TDL__NOT, tdl_tls *), ("size", TDL__NUM), ("max", TDL__NUM), __VA_ARGS__)
#define tdl_tls_writer_init(...) \
  TDL__CK_CALL5(tdl_tls_writer_init, 2, ("w", TDL__PTR, tdl_writer *), ("s", TDL__PTR, tdl_tls *), \
                ("mem", TDL__NOT, tdl_tls *), ("size", TDL__NUM), ("max", TDL__NUM), __VA_ARGS__)
#define tdl_tls_alpn(...) \
  TDL__CK_CALL3(tdl_tls_alpn, 1, ("s", TDL__PTR, const tdl_tls *), ("buf", TDL__DATA), ("cap", TDL__NUM), \
                __VA_ARGS__)

#endif
