/* SPDX-License-Identifier: MIT */
/* Addresses: the forms users write (literals, "localhost", the wildcard,
 * Unix paths and abstract names), formatting, equality, and every malformed
 * string its own test, with the message tdl_addr_parse_error() gives for it.
 * Pure parsing: no loop, no socket. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "helpers.h"

static tdl_addr parse(const char *s)
{
  tdl_addr a;
  assert_int_equal(tdl_addr_parse(&a, s), 0);
  char msg[TDL_ADDR_ERRLEN];
  assert_int_equal(tdl_addr_parse_error(s, msg, sizeof msg), 0);
  assert_string_equal(msg, "");
  return a;
}

static void fmt_is(const tdl_addr *a, const char *want)
{
  char buf[TDL_ADDR_STRLEN];
  int n = tdl_addr_format(a, buf, sizeof buf);
  assert_int_equal(n, (int)strlen(want));
  assert_string_equal(buf, want);
}

static void addr_parses_and_formats(void **state)
{
  (void)state;
  static const char *const same[] = {
      "127.0.0.1:8080", "0.0.0.0:0", "255.255.255.255:65535", "10.1.2.3:1",
      "[::1]:80", "[::]:0", "[fe80::1%2]:443", "[2001:db8::42]:65535", "[::ffff:1.2.3.4]:7",
      "unix:/tmp/x.sock", "unix:relative/sock", "unix:@abstract", "unix:@a",
  };
  for (size_t i = 0; i < sizeof same / sizeof *same; i++) {
    tdl_addr a = parse(same[i]);
    fmt_is(&a, same[i]);
    tdl_addr b = parse(same[i]);
    assert_true(tdl_addr_equal(&a, &b));
  }
  tdl_addr a = parse("127.0.0.1:8080");
  assert_int_equal(a.u.sa.sa_family, AF_INET);
  assert_int_equal(a.len, sizeof(struct sockaddr_in));
  assert_int_equal(tdl_addr_port(&a), 8080);
  a = parse("[::1]:80");
  assert_int_equal(a.u.sa.sa_family, AF_INET6);
  assert_int_equal(tdl_addr_port(&a), 80);
  a = parse("[0:0::1]:00080"); /* non-canonical but valid: formats canonically */
  fmt_is(&a, "[::1]:80");
  a = parse("[fe80::1%4294967295]:1");
  assert_int_equal(a.u.in6.sin6_scope_id, 4294967295u);

  /* Unix: path with its NUL; abstract name exactly, without one. */
  a = parse("unix:/p");
  assert_int_equal(a.u.sa.sa_family, AF_UNIX);
  assert_int_equal(a.len, offsetof(struct sockaddr_un, sun_path) + 3);
  assert_int_equal(tdl_addr_port(&a), -EAFNOSUPPORT);
  a = parse("unix:@ab");
  assert_int_equal(a.len, offsetof(struct sockaddr_un, sun_path) + 3);
  assert_int_equal(a.u.un.sun_path[0], 0);
  assert_memory_equal(a.u.un.sun_path + 1, "ab", 2);

  /* The longest names that fit: 107 bytes. */
  char s[200];
  memcpy(s, "unix:/", 6);
  memset(s + 6, 'p', 106);
  s[112] = 0;
  a = parse(s);
  fmt_is(&a, s);
  memcpy(s, "unix:@", 6);
  memset(s + 6, 'n', 107);
  s[113] = 0;
  a = parse(s);
  fmt_is(&a, s);
}


/* The forms of a configuration file: a name for the loopback, the wildcard. */
static void addr_user_forms(void **state)
{
  (void)state;
  tdl_addr a = parse("localhost:6379"), b;
  fmt_is(&a, "127.0.0.1:6379");
  a = parse("LocalHost:0");
  fmt_is(&a, "127.0.0.1:0");
  /* "*" and an empty host: the IPv6 wildcard (dual-stack once listening). */
  const char *const wild[] = {"*:6379", ":6379", "[::]:6379"};
  for (size_t i = 0; i < sizeof wild / sizeof *wild; i++) {
    a = parse(wild[i]);
    assert_int_equal(a.u.sa.sa_family, AF_INET6);
    assert_int_equal(a.len, sizeof(struct sockaddr_in6));
    assert_memory_equal(&a.u.in6.sin6_addr, &in6addr_any, sizeof in6addr_any);
    assert_int_equal(tdl_addr_port(&a), 6379);
    fmt_is(&a, "[::]:6379");
  }
  a = parse("[::1]:6379");
  fmt_is(&a, "[::1]:6379");
  /* 0.0.0.0 is a literal: exactly IPv4. */
  a = parse("0.0.0.0:6379");
  assert_int_equal(a.u.sa.sa_family, AF_INET);
  b = parse("*:6379");
  assert_false(tdl_addr_equal(&a, &b));
  a = parse(":0");
  assert_int_equal(tdl_addr_port(&a), 0);
}

/* A malformed string, where it goes wrong, and a piece of the reason. */
typedef struct bad_case {
  const char *s;
  size_t at;
  const char *why;
} bad_case;

static void addr_rejects(void **state)
{
  const bad_case *c = *state;
  tdl_addr a;
  memset(&a, 0x5a, sizeof a);
  assert_int_equal(tdl_addr_parse(&a, c->s), -EINVAL);
  assert_int_equal(a.len, 0); /* zeroed: nothing half-parsed survives */

  char msg[TDL_ADDR_ERRLEN], want[TDL_ADDR_ERRLEN];
  memset(msg, 'x', sizeof msg);
  assert_int_equal(tdl_addr_parse_error(c->s, msg, sizeof msg), -EINVAL);
  /* It names the string, the reason and the offset. */
  if (strlen(c->s) <= 48 && !strpbrk(c->s, "\"\\\n")) {
    snprintf(want, sizeof want, "bad address \"%s\": ", c->s);
    assert_memory_equal(msg, want, strlen(want));
  } else {
    assert_memory_equal(msg, "bad address \"", 13);
  }
  if (!strstr(msg, c->why))
    fail_msg("\"%s\" does not say \"%s\"", msg, c->why);
  snprintf(want, sizeof want, " (at offset %zu)", c->at);
  assert_true(strlen(msg) > strlen(want));
  assert_string_equal(msg + strlen(msg) - strlen(want), want);
}

static char long_path[200], long_abstract[200], long_host[300], long_name[300];

#define NOPORT "no ':' and port"
#define EMPTYPORT "no port after ':'"
#define NOTNUM "the port is not a decimal number"
#define AFTER "unexpected characters after the port"
#define BIG "port above 65535"
#define NOTV4 "not an IPv4 address"
#define NOTV6 "not an IPv6 address"
#define NAME "only localhost is known (no DNS)"
#define CHAR "unexpected character in the host"
#define SCOPE "the scope after '%' is not an interface number"

static const bad_case bad[] = {
    {"", 0, "empty string"},
    {":", 1, EMPTYPORT},
    {"*", 1, NOPORT},
    {"*:", 2, EMPTYPORT},
    {"host:", 5, EMPTYPORT},
    {"localhost", 9, NOPORT},
    {"localhost:", 10, EMPTYPORT},
    {":99999", 1, BIG},
    {"*:65536", 2, BIG},
    {"[::1", 4, "no ']' after the IPv6 address"},
    {"1.2.3:80", 0, NOTV4},
    {"1.2.3.4", 7, NOPORT},
    {"1.2.3.4:", 8, EMPTYPORT},
    {"1.2.3.4:65536", 8, BIG},
    {"1.2.3.4:99999", 8, BIG},
    {"1.2.3.4:123456", 8, BIG},
    {"1.2.3.4:-1", 8, NOTNUM},
    {"1.2.3.4:+80", 8, NOTNUM},
    {"1.2.3.4: 80", 8, NOTNUM},
    {"1.2.3.4:80 ", 10, AFTER},
    {"1.2.3.4:8o", 9, AFTER},
    {"1.2.3.4:80x", 10, AFTER},
    {"1.2.3.4:80\n", 10, AFTER},
    {"1.2.3.4:80:80", 10, AFTER},
    {" 1.2.3.4:80", 0, CHAR},
    {"1.2.3.4 :80", 7, CHAR},
    {"local host:80", 5, CHAR},
    {"**:80", 0, CHAR},
    {"1.2.3.4.5:80", 0, NOTV4},
    {"256.1.1.1:80", 0, NOTV4},
    {"01.2.3.4:80", 0, NOTV4},
    {"0x7f.0.0.1:80", 0, NAME},
    {"example.com:80", 0, NAME},
    {"localhost.:80", 0, NAME},
    {"::1:80", 0, "an IPv6 address goes in brackets"},
    {"::1]:80", 1, NOTNUM},
    {"[::1]", 5, "no ':' and port after ']'"},
    {"[::1]:", 6, EMPTYPORT},
    {"[::1]80", 5, "no ':' and port after ']'"},
    {"[::1:80", 7, "no ']'"},
    {"[]:80", 1, "empty IPv6 address"},
    {"[*]:80", 1, NOTV6},
    {"[localhost]:80", 1, NOTV6},
    {"[1.2.3.4]:80", 1, NOTV6},
    {"[::1%]:80", 5, SCOPE},
    {"[::1%eth0]:80", 5, SCOPE},
    {"[::1%99999999999]:80", 5, SCOPE},
    {"[::1%2x]:80", 5, SCOPE},
    {"[::1]:80x", 8, AFTER},
    {"[::g]:80", 1, NOTV6},
    {"unix:", 5, "empty Unix socket path"},
    {"unix:@", 6, "empty abstract socket name"},
    {"UNIX:/tmp/s", 5, NOTNUM},
    {"tcp://1.2.3.4:80", 3, "not a URL"},
    {long_path, 112, "Unix socket path longer than 107 bytes"},
    {long_abstract, 113, "abstract socket name longer than 107 bytes"},
    {long_host, 1, NOTV6},
    {long_name, 0, NAME},
};

static void addr_rejects_null(void **state)
{
  (void)state;
  tdl_addr a;
  assert_int_equal(tdl_addr_parse(&a, NULL), -EINVAL);
  assert_int_equal(a.len, 0);
  assert_int_equal(tdl_addr_parse(NULL, "127.0.0.1:1"), -EINVAL);
  char msg[TDL_ADDR_ERRLEN];
  assert_int_equal(tdl_addr_parse_error(NULL, msg, sizeof msg), -EINVAL);
  assert_string_equal(msg, "bad address: no string (NULL)");
}

/* The message is cut to fit any buffer, and NUL-terminated. */
static void addr_error_message_sizes(void **state)
{
  (void)state;
  char msg[TDL_ADDR_ERRLEN];
  assert_int_equal(tdl_addr_parse_error("1.2.3.4:99999", msg, sizeof msg), -EINVAL);
  assert_string_equal(msg, "bad address \"1.2.3.4:99999\": port above 65535 (at offset 8)");
  memset(msg, 'x', sizeof msg);
  assert_int_equal(tdl_addr_parse_error("1.2.3.4:99999", msg, 12), -EINVAL);
  assert_string_equal(msg, "bad address");
  assert_int_equal(tdl_addr_parse_error("1.2.3.4:99999", msg, 1), -EINVAL);
  assert_string_equal(msg, "");
  assert_int_equal(tdl_addr_parse_error("1.2.3.4:99999", NULL, 0), -EINVAL);
  assert_int_equal(tdl_addr_parse_error("1.2.3.4:80", NULL, 0), 0);
  /* A long string is quoted in part; unprintable bytes are escaped; the
   * longest message fits TDL_ADDR_ERRLEN. */
  char s[200];
  memset(s, 0x01, 150);
  strcpy(s + 150, ":80");
  assert_int_equal(tdl_addr_parse_error(s, msg, sizeof msg), -EINVAL);
  assert_memory_equal(msg, "bad address \"\\x01\\x01", 21);
  assert_non_null(strstr(msg, "\\x01...\": "));
  assert_non_null(strstr(msg, "(at offset 0)"));
  assert_true(strlen(msg) < sizeof msg - 1);
  /* A quote inside is escaped; a space is not. */
  assert_int_equal(tdl_addr_parse_error("a\"b c:1", msg, sizeof msg), -EINVAL);
  assert_memory_equal(msg, "bad address \"a\\x22b c:1\": ", 26);
}

static void addr_format_errors(void **state)
{
  (void)state;
  tdl_addr a = parse("127.0.0.1:8080");
  char buf[TDL_ADDR_STRLEN];
  /* Exactly fits (14 chars + NUL), one byte less does not. */
  assert_int_equal(tdl_addr_format(&a, buf, 15), 14);
  assert_int_equal(tdl_addr_format(&a, buf, 14), -ENOSPC);
  assert_string_equal(buf, "");
  assert_int_equal(tdl_addr_format(&a, buf, 0), -ENOSPC);
  assert_int_equal(tdl_addr_format(NULL, buf, sizeof buf), -EINVAL);
  assert_int_equal(tdl_addr_format(&a, NULL, sizeof buf), -EINVAL);
  tdl_addr empty = {0};
  assert_int_equal(tdl_addr_format(&empty, buf, sizeof buf), -EINVAL);
  assert_int_equal(tdl_addr_port(&empty), -EINVAL);
  assert_int_equal(tdl_addr_port(NULL), -EINVAL);
  tdl_addr odd = {0};
  odd.u.sa.sa_family = AF_APPLETALK;
  odd.len = sizeof odd.u.sa;
  assert_int_equal(tdl_addr_format(&odd, buf, sizeof buf), -EAFNOSUPPORT);
  /* A truncated IPv6 address is refused, not read past its length. */
  tdl_addr shortv6 = parse("[::1]:1");
  shortv6.len = sizeof(struct sockaddr_in);
  assert_int_equal(tdl_addr_format(&shortv6, buf, sizeof buf), -EINVAL);
}

static void addr_from_sockaddr_and_equal(void **state)
{
  (void)state;
  tdl_addr a, b;
  struct sockaddr_un un = {0};
  un.sun_family = AF_UNIX;
  /* An abstract name with bytes that need escaping. */
  memcpy(un.sun_path, "\0x\\y\n\xff", 6);
  assert_int_equal(tdl_addr_from_sockaddr(&a, (struct sockaddr *)&un, offsetof(struct sockaddr_un, sun_path) + 6), 0);
  fmt_is(&a, "unix:@x\\x5cy\\x0a\\xff");
  /* An unnamed Unix socket (family only). */
  assert_int_equal(tdl_addr_from_sockaddr(&a, (struct sockaddr *)&un, sizeof(sa_family_t)), 0);
  fmt_is(&a, "unix:");
  assert_false(tdl_addr_equal(&a, &a)); /* unnamed sockets name nothing */

  struct sockaddr_in in = {0};
  in.sin_family = AF_INET;
  assert_int_equal(tdl_addr_from_sockaddr(&a, (struct sockaddr *)&in, sizeof in - 1), -EINVAL);
  assert_int_equal(tdl_addr_from_sockaddr(&a, (struct sockaddr *)&in, 1), -EINVAL);
  assert_int_equal(tdl_addr_from_sockaddr(&a, NULL, sizeof in), -EINVAL);
  struct sockaddr_storage big = {0};
  big.ss_family = AF_INET;
  assert_int_equal(tdl_addr_from_sockaddr(&a, (struct sockaddr *)&big, sizeof big + 1), -EINVAL);
  big.ss_family = AF_APPLETALK;
  assert_int_equal(tdl_addr_from_sockaddr(&a, (struct sockaddr *)&big, sizeof big), -EAFNOSUPPORT);

  /* Equality ignores how a path's length was counted. */
  a = parse("unix:/tmp/s");
  b = a;
  b.len--; /* without the NUL, as the kernel also accepts */
  assert_true(tdl_addr_equal(&a, &b));
  b = parse("unix:@/tmp/s");
  assert_false(tdl_addr_equal(&a, &b));
  a = parse("127.0.0.1:1");
  b = parse("127.0.0.1:2");
  assert_false(tdl_addr_equal(&a, &b));
  b = parse("[::ffff:127.0.0.1]:1");
  assert_false(tdl_addr_equal(&a, &b));
  assert_false(tdl_addr_equal(&a, NULL));
}

/* The string itself names its test when it prints well. */
static const char *case_name(const char *s)
{
  size_t n = strlen(s);
  bool plain = n > 0 && n < 40;
  for (size_t i = 0; i < n; i++)
    plain = plain && s[i] >= 0x20 && s[i] < 0x7f;
  return plain ? s : "addr_rejects (long, empty or unprintable)";
}

int main(void)
{
  memcpy(long_path, "unix:/", 6);
  memset(long_path + 6, 'p', 107); /* 108 bytes: no room for the NUL */
  memcpy(long_abstract, "unix:@", 6);
  memset(long_abstract + 6, 'n', 108);
  long_host[0] = '[';
  memset(long_host + 1, '1', 250);
  strcpy(long_host + 251, "]:80");
  memset(long_name, 'a', 250);
  strcpy(long_name + 250, ":80");

  enum { NBAD = sizeof bad / sizeof *bad };
  struct CMUnitTest tests[NBAD + 6];
  size_t n = 0;
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(addr_parses_and_formats);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(addr_user_forms);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(addr_rejects_null);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(addr_error_message_sizes);
  for (size_t i = 0; i < NBAD; i++) {
    tests[n] = (struct CMUnitTest)cmocka_unit_test_prestate(addr_rejects, (void *)&bad[i]);
    tests[n++].name = case_name(bad[i].s);
  }
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(addr_format_errors);
  tests[n++] = (struct CMUnitTest)cmocka_unit_test(addr_from_sockaddr_and_equal);
  return _cmocka_run_group_tests("test_addr", tests, n, NULL, NULL);
}
