#ifndef FAKE_FOREACH_H
#define FAKE_FOREACH_H
/* FAKE_FOR_EACH(m, a, b, ...) expands to m(0, a) m(1, b) ... (up to 24; nothing
 * for an empty list, as in the `()` arguments of a function without any). */
#define FAKE_NARGS(...) FAKE_NARGS_(__VA_ARGS__ __VA_OPT__(,) 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define FAKE_NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, _19, _20, _21, _22, _23, _24, n, ...) n
#define FAKE_CAT(a, b) FAKE_CAT_(a, b)
#define FAKE_CAT_(a, b) a##b
#define FAKE_FOR_EACH(m, ...) FAKE_CAT(FAKE_FE_, FAKE_NARGS(__VA_ARGS__))(m, 0, __VA_ARGS__)
#define FAKE_FE_0(m, i, ...)
#define FAKE_FE_1(m, i, x) m(i, x)
#define FAKE_FE_2(m, i, x, ...) m(i, x) FAKE_FE_1(m, i + 1, __VA_ARGS__)
#define FAKE_FE_3(m, i, x, ...) m(i, x) FAKE_FE_2(m, i + 1, __VA_ARGS__)
#define FAKE_FE_4(m, i, x, ...) m(i, x) FAKE_FE_3(m, i + 1, __VA_ARGS__)
#define FAKE_FE_5(m, i, x, ...) m(i, x) FAKE_FE_4(m, i + 1, __VA_ARGS__)
#define FAKE_FE_6(m, i, x, ...) m(i, x) FAKE_FE_5(m, i + 1, __VA_ARGS__)
#define FAKE_FE_7(m, i, x, ...) m(i, x) FAKE_FE_6(m, i + 1, __VA_ARGS__)
#define FAKE_FE_8(m, i, x, ...) m(i, x) FAKE_FE_7(m, i + 1, __VA_ARGS__)
#define FAKE_FE_9(m, i, x, ...) m(i, x) FAKE_FE_8(m, i + 1, __VA_ARGS__)
#define FAKE_FE_10(m, i, x, ...) m(i, x) FAKE_FE_9(m, i + 1, __VA_ARGS__)
#define FAKE_FE_11(m, i, x, ...) m(i, x) FAKE_FE_10(m, i + 1, __VA_ARGS__)
#define FAKE_FE_12(m, i, x, ...) m(i, x) FAKE_FE_11(m, i + 1, __VA_ARGS__)
#define FAKE_FE_13(m, i, x, ...) m(i, x) FAKE_FE_12(m, i + 1, __VA_ARGS__)
#define FAKE_FE_14(m, i, x, ...) m(i, x) FAKE_FE_13(m, i + 1, __VA_ARGS__)
#define FAKE_FE_15(m, i, x, ...) m(i, x) FAKE_FE_14(m, i + 1, __VA_ARGS__)
#define FAKE_FE_16(m, i, x, ...) m(i, x) FAKE_FE_15(m, i + 1, __VA_ARGS__)
#define FAKE_FE_17(m, i, x, ...) m(i, x) FAKE_FE_16(m, i + 1, __VA_ARGS__)
#define FAKE_FE_18(m, i, x, ...) m(i, x) FAKE_FE_17(m, i + 1, __VA_ARGS__)
#define FAKE_FE_19(m, i, x, ...) m(i, x) FAKE_FE_18(m, i + 1, __VA_ARGS__)
#define FAKE_FE_20(m, i, x, ...) m(i, x) FAKE_FE_19(m, i + 1, __VA_ARGS__)
#define FAKE_FE_21(m, i, x, ...) m(i, x) FAKE_FE_20(m, i + 1, __VA_ARGS__)
#define FAKE_FE_22(m, i, x, ...) m(i, x) FAKE_FE_21(m, i + 1, __VA_ARGS__)
#define FAKE_FE_23(m, i, x, ...) m(i, x) FAKE_FE_22(m, i + 1, __VA_ARGS__)
#define FAKE_FE_24(m, i, x, ...) m(i, x) FAKE_FE_23(m, i + 1, __VA_ARGS__)
#endif
