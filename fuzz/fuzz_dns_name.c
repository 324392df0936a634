/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: host and service strings (src/dns/name.c), the cheap
 * path of tdl_dns_resolve.
 *
 * Input: one control byte (bit 0x80: a service, else a host; bits 0-1: the
 * family asked for), then the string.  Checked, beyond "no crash":
 *  - a service is accepted exactly as dns.h says: NULL is port 0; 1 to 5
 *    digits up to 65535 are that port; 1 to 32 letters, digits and '-' with
 *    a letter among them are a name; anything else is -EINVAL;
 *  - a host reported as a name to look up (0) is exactly a string that
 *    follows dns.h's rules (labels of 1..63 letters, digits, '-', '_'; at
 *    most 253 bytes plus a trailing dot; last label not all digits; nothing
 *    inet_aton reads as an address; not a literal, not localhost);
 *  - localhost (any case, optional trailing dot) is 127.0.0.1 then ::1, as
 *    the family allows; a literal is of the family asked for (else -ENXIO),
 *    port 0, reads back to the same bytes, and an IPv4 literal is the
 *    canonical dotted quad;
 *  - literals are read as tdl_addr_parse reads them: whatever
 *    tdl_addr_parse takes as "H:0" or "[H]:0" is the same address here
 *    (but for scopes of more than 25 digits), and every IPv4 literal taken
 *    here is taken there.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dns/dns_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) ((x) ? (void)0 : (fprintf(stderr, "fuzz_dns_name: failed: %s (line %d)\n", #x, __LINE__), abort()))

static bool digit(char c) { return c >= '0' && c <= '9'; }
static bool letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* dns.h's service rules, written out again. */
static int expected_service(const char *s, size_t n)
{
  if (n == 0 || n > 32)
    return -EINVAL;
  bool letters = false, digits_only = true;
  for (size_t i = 0; i < n; i++) {
    if (!digit(s[i]) && !letter(s[i]) && s[i] != '-')
      return -EINVAL;
    letters |= letter(s[i]);
    digits_only &= digit(s[i]);
  }
  if (letters)
    return TDL__DNS_SERVICE_NAMED;
  if (!digits_only || n > 5)
    return -EINVAL;
  long v = strtol(s, NULL, 10);
  return v <= 65535 ? (int)v : -EINVAL;
}

/* dns.h's host-name rules, written out again. */
static bool expected_name(const char *h, size_t n)
{
  if (n > 0 && h[n - 1] == '.')
    n--;
  if (n == 0 || n > TDL_DNS_NAME_MAX)
    return false;
  size_t start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i < n && h[i] != '.') {
      if (!digit(h[i]) && !letter(h[i]) && h[i] != '-' && h[i] != '_')
        return false;
      continue;
    }
    size_t label = i - start;
    if (label == 0 || label > 63)
      return false;
    if (i == n) {
      size_t d = 0;
      while (d < label && digit(h[start + d]))
        d++;
      if (d == label)
        return false; /* the last label all digits */
    }
    start = i + 1;
  }
  struct in_addr ignored;
  return inet_aton(h, &ignored) == 0;
}

static bool localhost_name(const char *h)
{
  return strcasecmp(h, "localhost") == 0 || strcasecmp(h, "localhost.") == 0;
}

static void check_loopback(const tdl_addr *a, int family)
{
  CHECK(a->u.sa.sa_family == family);
  if (family == AF_INET)
    CHECK(a->len == sizeof a->u.in4 && a->u.in4.sin_addr.s_addr == htonl(INADDR_LOOPBACK) && a->u.in4.sin_port == 0);
  else
    CHECK(a->len == sizeof a->u.in6 && IN6_IS_ADDR_LOOPBACK(&a->u.in6.sin6_addr) && a->u.in6.sin6_port == 0);
}

static void fuzz_host(const char *h, size_t n, int family)
{
  tdl_addr lit[2], again[2];
  memset(lit, 0xa5, sizeof lit);
  int r = tdl__dns_host_parse(h, family, lit);
  CHECK(r == -EINVAL || r == -ENXIO || r == -ENODEV || (r >= 0 && r <= 2));
  if (r != -ENODEV) /* -ENODEV hangs on the machine's interfaces, not on h */
    CHECK(tdl__dns_host_parse(h, family, again) == r);
  bool has_colon = memchr(h, ':', n) != NULL;
  struct in_addr v4;
  bool is_v4 = !has_colon && inet_pton(AF_INET, h, &v4) == 1;

  if (localhost_name(h)) {
    CHECK(r == (family == AF_UNSPEC ? 2 : 1));
    if (family == AF_UNSPEC) {
      check_loopback(&lit[0], AF_INET);
      check_loopback(&lit[1], AF_INET6);
    } else {
      check_loopback(&lit[0], family);
    }
    return;
  }
  CHECK(r != 2);
  if (!has_colon && !is_v4)
    CHECK((r == 0) == expected_name(h, n) && (r == 0 || r == -EINVAL));
  if (r == 0)
    CHECK(!has_colon && !is_v4);
  if (r == -ENXIO || r == 1) {
    CHECK(has_colon || is_v4);
    int lf = lit[0].u.sa.sa_family;
    CHECK(lf == (has_colon ? AF_INET6 : AF_INET));
    CHECK(r == 1 ? family == AF_UNSPEC || family == lf : family != AF_UNSPEC && family != lf);
  }
  if (r == -ENODEV)
    CHECK(has_colon && strchr(h, '%') != NULL);

  /* As tdl_addr_parse reads it. */
  size_t cap = n + 8;
  char *s = malloc(cap);
  snprintf(s, cap, has_colon ? "[%s]:0" : "%s:0", h);
  tdl_addr a;
  int pa = tdl_addr_parse(&a, s);
  free(s);
  /* Not compared: a scope padded with zeros past 25 characters, which
   * tdl_addr_parse reads and name.c refuses (neither is wrong about such
   * a string). */
  const char *pct = strchr(h, '%');
  bool plain_literal = n > 0 && strcmp(h, "*") != 0 && strcasecmp(h, "localhost") != 0 &&
                       strcmp(h, "unix") != 0 /* "unix:0" is a Unix path */ && (!pct || strlen(pct + 1) <= 25);
  if (pa == 0 && plain_literal) {
    CHECK(a.u.sa.sa_family == (has_colon ? AF_INET6 : AF_INET));
    if (family == AF_UNSPEC || family == a.u.sa.sa_family)
      CHECK(r == 1 && tdl_addr_equal(&a, &lit[0]) && a.len == lit[0].len);
    else
      CHECK(r == -ENXIO);
  }
  if (is_v4)
    CHECK(pa == 0);

  if (r == 1) {
    const tdl_addr *l = &lit[0];
    char text[INET6_ADDRSTRLEN];
    if (l->u.sa.sa_family == AF_INET) {
      CHECK(l->len == sizeof l->u.in4 && l->u.in4.sin_port == 0);
      CHECK(inet_ntop(AF_INET, &l->u.in4.sin_addr, text, sizeof text) && strcmp(text, h) == 0);
    } else {
      CHECK(l->len == sizeof l->u.in6 && l->u.in6.sin6_port == 0);
      char host[128];
      size_t k = strcspn(h, "%");
      CHECK(k < sizeof host);
      memcpy(host, h, k);
      host[k] = 0;
      struct in6_addr v6;
      CHECK(inet_pton(AF_INET6, host, &v6) == 1 && memcmp(&v6, &l->u.in6.sin6_addr, sizeof v6) == 0);
      if (h[k] == 0)
        CHECK(l->u.in6.sin6_scope_id == 0);
      else if (strspn(h + k + 1, "0123456789") == strlen(h + k + 1))
        CHECK(l->u.in6.sin6_scope_id == strtoull(h + k + 1, NULL, 10));
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static const int families[4] = {AF_UNSPEC, AF_INET, AF_INET6, AF_UNSPEC};
  if (size < 1) {
    tdl_addr lit[2];
    CHECK(tdl__dns_service_parse(NULL) == 0);
    CHECK(tdl__dns_host_parse(NULL, AF_UNSPEC, lit) == -EINVAL);
    return 0;
  }
  uint8_t ctl = data[0];
  /* The string alone in a block of its size, so that ASan sees an overread. */
  size_t n = strnlen((const char *)data + 1, size - 1);
  char *s = malloc(n + 1);
  memcpy(s, data + 1, n);
  s[n] = 0;
  if (ctl & 0x80)
    CHECK(tdl__dns_service_parse(s) == expected_service(s, n));
  else
    fuzz_host(s, n, families[ctl & 3]);
  free(s);
  return 0;
}
