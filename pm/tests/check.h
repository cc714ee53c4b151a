/* SPDX-License-Identifier: MIT */
/*
 * check.h - assertions for the PM test programs.
 *
 * Every failed check prints "file:line: [tag] message" on stderr and exits
 * with status 1, so a test fails loudly and says where.  The tag names the
 * process in multi-process tests ("rank 2"); it is empty otherwise.
 *
 * Values are printed as well as expressions: CHECK_EQ(a, b) says what a and
 * b were, CHECK_ERR(call, -EAGAIN) says which errno came back instead.
 */
#ifndef PM_TESTS_CHECK_H
#define PM_TESTS_CHECK_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Weak: one tag shared by every file of a program that includes this. */
__attribute__((weak)) char check_tag[32];

static inline void check_set_tag(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));
static inline void check_set_tag(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(check_tag, sizeof(check_tag), fmt, ap);
	va_end(ap);
}

__attribute__((noreturn, format(printf, 3, 4)))
static inline void check_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fprintf(stderr, "%s:%d: %s%s%sFAIL: ", file, line, check_tag[0] ? "[" : "",
		check_tag, check_tag[0] ? "] " : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	exit(1);
}

/* A negative errno as a readable name (the common ones) plus its text. */
static inline const char *check_errname(long long err)
{
	static char buf[96];
	const char *name = NULL;

	switch (-err) {
	case 0: name = "0"; break;
	case EAGAIN: name = "-EAGAIN"; break;
	case EINVAL: name = "-EINVAL"; break;
	case EBUSY: name = "-EBUSY"; break;
	case EMSGSIZE: name = "-EMSGSIZE"; break;
	case EPROTO: name = "-EPROTO"; break;
	case ENOSPC: name = "-ENOSPC"; break;
	case ENOENT: name = "-ENOENT"; break;
	case ERANGE: name = "-ERANGE"; break;
	case EPIPE: name = "-EPIPE"; break;
	case ETIMEDOUT: name = "-ETIMEDOUT"; break;
	case ECONNRESET: name = "-ECONNRESET"; break;
	case ENOMEM: name = "-ENOMEM"; break;
	case EEXIST: name = "-EEXIST"; break;
	case E2BIG: name = "-E2BIG"; break;
	default: break;
	}
	if (name && err <= 0)
		snprintf(buf, sizeof(buf), "%s (%s)", name, err ? strerror((int)-err) : "ok");
	else
		snprintf(buf, sizeof(buf), "%lld%s%s", err, err < 0 ? " " : "",
			 err < 0 ? strerror((int)-err) : "");
	return buf;
}

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond))                                                 \
			check_fail(__FILE__, __LINE__, "%s", #cond);         \
	} while (0)

#define CHECK_MSG(cond, ...)                                                 \
	do {                                                                 \
		if (!(cond))                                                 \
			check_fail(__FILE__, __LINE__, __VA_ARGS__);         \
	} while (0)

/* Integer equality; both sides are printed on failure. */
#define CHECK_EQ(a, b)                                                       \
	do {                                                                 \
		long long check_a_ = (long long)(a), check_b_ = (long long)(b); \
		if (check_a_ != check_b_)                                    \
			check_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", \
				   #a, #b, check_a_, check_b_);              \
	} while (0)

/* Unsigned 64-bit comparisons (counters, positions). */
#define CHECK_U64(a, op, b)                                                  \
	do {                                                                 \
		unsigned long long check_a_ = (unsigned long long)(a);      \
		unsigned long long check_b_ = (unsigned long long)(b);      \
		if (!(check_a_ op check_b_))                                 \
			check_fail(__FILE__, __LINE__, "%s %s %s: %llu vs %llu", \
				   #a, #op, #b, check_a_, check_b_);         \
	} while (0)

/* A call returning 0 or a negative errno must return exactly expected. */
#define CHECK_ERR(call, expected)                                            \
	do {                                                                 \
		long long check_r_ = (long long)(call);                      \
		long long check_e_ = (long long)(expected);                  \
		if (check_r_ != check_e_) {                                  \
			char check_got_[96];                                 \
			snprintf(check_got_, sizeof(check_got_), "%s",       \
				 check_errname(check_r_));                   \
			check_fail(__FILE__, __LINE__, "%s returned %s, expected %s", \
				   #call, check_got_, check_errname(check_e_)); \
		}                                                            \
	} while (0)

#define CHECK_OK(call) CHECK_ERR(call, 0)

/*
 * Make the program a singleton job whatever launched it: remove every
 * PMIX_* variable from the environment (meson's env: can set variables but
 * not unset them).  The scan starts again after each removal, which may
 * move the entries that follow.
 */
extern char **environ;

static inline void check_unset_pmix(void)
{
	char **e = environ;

	while (*e) {
		if (strncmp(*e, "PMIX_", 5) == 0) {
			char name[256];
			size_t len = strcspn(*e, "=");

			CHECK(len < sizeof(name));
			memcpy(name, *e, len);
			name[len] = 0;
			unsetenv(name);
			e = environ;
		} else {
			e++;
		}
	}
}

static inline uint64_t check_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: a reproducible stream of pseudo-random numbers. */
static inline uint64_t check_rand(uint64_t *state)
{
	uint64_t x = *state;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*state = x;
	return x * 0x2545F4914F6CDD1Dull;
}

/*
 * The pattern of a message identified by seed: byte i is byte i % 8 of a
 * 64-bit mix of (seed, i / 8).  Cheap enough for millions of messages, and
 * two seeds give different bytes almost everywhere, so stale or misplaced
 * data is caught.
 */
static inline uint64_t check_pattern_word(uint64_t seed, uint64_t k)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + (k + 1) * 0xBF58476D1CE4E5B9ull;

	x ^= x >> 31;
	x *= 0x94D049BB133111EBull;
	return x ^ (x >> 29);
}

static inline void check_fill(void *buf, size_t len, uint64_t seed)
{
	uint8_t *b = buf;
	size_t k = 0;

	for (; (k + 1) * 8 <= len; k++) {
		uint64_t w = check_pattern_word(seed, k);

		memcpy(b + k * 8, &w, 8);
	}
	if (k * 8 < len) {
		uint64_t w = check_pattern_word(seed, k);

		memcpy(b + k * 8, &w, len - k * 8);
	}
}

/* Index of the first wrong byte, or -1 when buf holds the pattern. */
static inline long long check_verify(const void *buf, size_t len, uint64_t seed)
{
	const uint8_t *b = buf;

	for (size_t k = 0; k * 8 < len; k++) {
		uint64_t w = check_pattern_word(seed, k);
		size_t n = len - k * 8 < 8 ? len - k * 8 : 8;

		if (memcmp(b + k * 8, &w, n) != 0)
			for (size_t i = 0; i < n; i++)
				if (b[k * 8 + i] != ((const uint8_t *)&w)[i])
					return (long long)(k * 8 + i);
	}
	return -1;
}

#define CHECK_PATTERN(buf, len, seed)                                        \
	do {                                                                 \
		long long check_at_ = check_verify((buf), (len), (seed));    \
		if (check_at_ >= 0)                                          \
			check_fail(__FILE__, __LINE__,                       \
				   "payload of %zu bytes (seed %llu) wrong at byte %lld", \
				   (size_t)(len), (unsigned long long)(seed), check_at_); \
	} while (0)

/*
 * A fresh directory under /tmp named after the test, removed with its files
 * at exit, also when a failed check exits at once.  Returns its path.
 */
#include <dirent.h>
#include <unistd.h>

static char check_tmp_dir[64];

static inline void check_tmp_dir_remove(void)
{
	DIR *d = opendir(check_tmp_dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char path[512];

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", check_tmp_dir, e->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(check_tmp_dir);
}

static inline const char *check_tmp_dir_make(const char *test)
{
	snprintf(check_tmp_dir, sizeof(check_tmp_dir), "/tmp/pm-test-%s.XXXXXX", test);
	CHECK(mkdtemp(check_tmp_dir));
	atexit(check_tmp_dir_remove);
	return check_tmp_dir;
}

#endif /* PM_TESTS_CHECK_H */
