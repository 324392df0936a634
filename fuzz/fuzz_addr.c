/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: address parsing and formatting (src/net/addr.c).
 *
 * Input: one control byte, then either a string (control bit 0x80 clear) or
 * the raw bytes of a tdl_addr (set).  Checked, beyond "no crash":
 *  - tdl_addr_parse, tdl_addr_parse_error and tdl__addr_parse_kind agree;
 *    a failure leaves the address zeroed and a message naming the problem
 *    and an offset inside the string, which fits TDL_ADDR_ERRLEN, and which
 *    a smaller buffer holds cut, NUL-terminated;
 *  - a parsed address formats (within TDL_ADDR_STRLEN; -ENOSPC and "" when
 *    the buffer is too small) and the string parses back to an equal
 *    address that formats the same, unless it is a Unix name with bytes
 *    the format escapes; the wildcard is [::], localhost 127.0.0.1, the port
 *    is the one written, and an IPv4 literal with a plain port formats back
 *    to the very string;
 *  - any raw address of a known family formats within TDL_ADDR_STRLEN, an
 *    IP one (and a Unix one of plain bytes that fits) parses back equal, a
 *    Unix path starting with '@' is not written as an abstract name, and
 *    tdl_addr_from_sockaddr copies it to an address that formats the same.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/net_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) ((x) ? (void)0 : (fprintf(stderr, "fuzz_addr: failed: %s (line %d)\n", #x, __LINE__), abort()))

static bool all_zero(const void *p, size_t n)
{
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i])
      return false;
  return true;
}

/* Bytes tdl_addr_format writes as they are (not as \xHH). */
static bool plain(const unsigned char *p, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (p[i] <= 0x20 || p[i] >= 0x7f || p[i] == '\\')
      return false;
  return true;
}

/* The name of a Unix address as tdl_addr_format reads it, and whether it is
 * abstract; NULL for an unnamed one. */
static const unsigned char *unix_name(const tdl_addr *a, size_t *n, bool *abstract)
{
  size_t len = (size_t)a->len - offsetof(struct sockaddr_un, sun_path);
  if (len > sizeof a->u.un.sun_path)
    len = sizeof a->u.un.sun_path; /* a longer len names nothing more */
  const unsigned char *p = (const unsigned char *)a->u.un.sun_path;
  if (len == 0)
    return NULL;
  *abstract = p[0] == 0;
  if (*abstract) {
    *n = len - 1;
    return p + 1;
  }
  *n = strnlen((const char *)p, len);
  return p;
}

/* Format a; check the length, the NUL and what a buffer of cap bytes gets. */
static int format_checked(const tdl_addr *a, char *buf, size_t cap)
{
  int n = tdl_addr_format(a, buf, TDL_ADDR_STRLEN);
  CHECK(n != -ENOSPC); /* net.h: TDL_ADDR_STRLEN always suffices */
  if (n < 0)
    return n;
  CHECK((size_t)n < TDL_ADDR_STRLEN && strlen(buf) == (size_t)n);
  char small[TDL_ADDR_STRLEN];
  memset(small, 'x', sizeof small);
  cap %= (size_t)n + 2; /* 0..n+1: too small, or just enough */
  int m = tdl_addr_format(a, cap ? small : buf, cap);
  if (cap == 0) {
    CHECK(m == -ENOSPC);
  } else if (cap <= (size_t)n) {
    CHECK(m == -ENOSPC && small[0] == 0);
  } else {
    CHECK(m == n && memcmp(small, buf, (size_t)n + 1) == 0);
  }
  return n;
}

/* a formats and parses back to an address equal to it that formats the same. */
static void round_trip(const tdl_addr *a, const char *text)
{
  tdl_addr b;
  char again[TDL_ADDR_STRLEN];
  CHECK(tdl_addr_parse(&b, text) == 0);
  CHECK(tdl_addr_equal(a, &b) && tdl_addr_equal(&b, a) && tdl_addr_equal(&b, &b));
  CHECK(tdl_addr_format(&b, again, sizeof again) >= 0 && strcmp(again, text) == 0);
}

static void fuzz_string(uint8_t ctl, const char *s, size_t len)
{
  tdl_addr a, k;
  int kind = -1;
  int r = tdl_addr_parse(&a, s);
  CHECK(r == 0 || r == -EINVAL);
  CHECK(tdl__addr_parse_kind(&k, s, &kind) == r && memcmp(&a, &k, sizeof a) == 0);

  char msg[1024], cut[TDL_ADDR_ERRLEN];
  memset(msg, 'x', sizeof msg);
  CHECK(tdl_addr_parse_error(s, msg, sizeof msg) == r);
  size_t mlen = strlen(msg);
  CHECK(tdl_addr_parse_error(s, NULL, 0) == r);
  size_t cap = 1 + (ctl & 0x3f) % sizeof cut;
  memset(cut, 'x', sizeof cut);
  CHECK(tdl_addr_parse_error(s, cut, cap) == r);
  CHECK(strlen(cut) == (mlen < cap - 1 ? mlen : cap - 1) && memcmp(cut, msg, strlen(cut)) == 0);

  if (r < 0) {
    CHECK(all_zero(&a, sizeof a));
    CHECK(mlen > 0 && mlen < TDL_ADDR_ERRLEN); /* TDL_ADDR_ERRLEN always suffices */
    CHECK(strncmp(msg, "bad address \"", 13) == 0);
    const char *at = NULL; /* the last one: the quoted string may hold one too */
    for (const char *q = msg; (q = strstr(q, " (at offset ")) != NULL; q++)
      at = q;
    CHECK(at != NULL);
    char *end;
    unsigned long off = strtoul(at + 12, &end, 10);
    CHECK(strcmp(end, ")") == 0 && off <= len);
    return;
  }
  CHECK(mlen == 0);
  CHECK(a.len > 0);

  char text[TDL_ADDR_STRLEN];
  int n = format_checked(&a, text, ctl);
  CHECK(n > 0);
  int family = a.u.sa.sa_family;
  if (family == AF_UNIX) {
    CHECK(strncmp(s, "unix:", 5) == 0 && tdl_addr_port(&a) == -EAFNOSUPPORT);
    size_t nn;
    bool abstract;
    const unsigned char *name = unix_name(&a, &nn, &abstract);
    CHECK(name != NULL && nn >= 1 && nn <= 107);
    CHECK(abstract == (s[5] == '@') && memcmp(name, s + 5 + abstract, nn) == 0 && nn == len - 5 - abstract);
    if (plain(name, nn)) {
      CHECK(strcmp(text, s) == 0);
      round_trip(&a, text);
    }
    return;
  }
  CHECK(family == AF_INET || family == AF_INET6);
  const char *colon = strrchr(s, ':');
  CHECK(colon != NULL);
  unsigned long port = strtoul(colon + 1, NULL, 10);
  CHECK(tdl_addr_port(&a) == (int)port);
  round_trip(&a, text);
  if (kind == TDL__HOST_WILDCARD) {
    CHECK(family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&a.u.in6.sin6_addr) && a.u.in6.sin6_scope_id == 0);
  } else if (kind == TDL__HOST_LOCALHOST) {
    CHECK(family == AF_INET && a.u.in4.sin_addr.s_addr == htonl(INADDR_LOOPBACK));
  } else {
    CHECK(kind == TDL__HOST_LITERAL);
    CHECK((family == AF_INET6) == (s[0] == '['));
    char p[8];
    snprintf(p, sizeof p, "%lu", port);
    if (family == AF_INET && strcmp(colon + 1, p) == 0)
      CHECK(strcmp(text, s) == 0); /* dotted quads without leading zeros are unique */
  }
}

static void fuzz_raw(uint8_t ctl, const uint8_t *data, size_t size)
{
  static const sa_family_t families[4] = {AF_INET, AF_INET6, AF_UNIX, AF_UNSPEC};
  tdl_addr a;
  memset(&a, 0, sizeof a);
  if (size < 2)
    return;
  a.len = (socklen_t)(data[0] % (sizeof a.u + 1));
  size_t n = size - 2 < sizeof a.u ? size - 2 : sizeof a.u;
  memcpy(&a.u, data + 2, n);
  a.u.sa.sa_family = (data[1] & 3) == 3 ? (sa_family_t)data[1] : families[data[1] & 3];

  char text[TDL_ADDR_STRLEN];
  int r = format_checked(&a, text, ctl);
  int family = a.u.sa.sa_family;
  bool known = family == AF_INET || family == AF_INET6 || family == AF_UNIX;
  CHECK(r >= 0 || r == -EINVAL || r == -EAFNOSUPPORT);
  CHECK(r != -EAFNOSUPPORT || !known);
  (void)tdl_addr_equal(&a, &a);

  tdl_addr b;
  int c = tdl_addr_from_sockaddr(&b, &a.u.sa, a.len);
  CHECK(c == 0 || c == -EINVAL || c == -EAFNOSUPPORT);
  if (c == 0) {
    char copy[TDL_ADDR_STRLEN];
    CHECK(r >= 0 && tdl_addr_format(&b, copy, sizeof copy) == r && strcmp(copy, text) == 0);
    CHECK(tdl_addr_equal(&a, &b) == tdl_addr_equal(&b, &a));
  }
  if (r < 0)
    return;
  if (family == AF_UNIX) {
    size_t nn;
    bool abstract;
    const unsigned char *name = unix_name(&a, &nn, &abstract);
    CHECK(tdl_addr_equal(&a, &a) == (name != NULL));
    if (name && !abstract && name[0] == '@')
      CHECK(strncmp(text, "unix:\\x40", 9) == 0); /* not "unix:@": that is abstract */
    else if (name && nn >= 1 && nn <= 107 && plain(name, nn))
      round_trip(&a, text);
    return;
  }
  round_trip(&a, text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 1) {
    tdl_addr a;
    char buf[TDL_ADDR_ERRLEN];
    CHECK(tdl_addr_parse(NULL, "1.2.3.4:5") == -EINVAL && tdl_addr_parse(&a, NULL) == -EINVAL && a.len == 0);
    CHECK(tdl_addr_parse_error(NULL, buf, sizeof buf) == -EINVAL && strcmp(buf, "bad address: no string (NULL)") == 0);
    CHECK(tdl_addr_format(NULL, buf, sizeof buf) == -EINVAL && tdl_addr_port(NULL) == -EINVAL);
    return 0;
  }
  uint8_t ctl = data[0];
  if (ctl & 0x80) {
    fuzz_raw(ctl, data + 1, size - 1);
    return 0;
  }
  /* The string alone in a block of its size, so that ASan sees an overread. */
  size_t len = strnlen((const char *)data + 1, size - 1);
  char *s = malloc(len + 1);
  memcpy(s, data + 1, len);
  s[len] = 0;
  fuzz_string(ctl, s, len);
  free(s);
  return 0;
}
