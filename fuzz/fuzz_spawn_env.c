/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: what tdl_process_spawn decides before there is a child
 * (src/process/path.c): the checks of env_set and env_unset, the child's
 * environment, and the program's PATH search.  Nothing is spawned; the
 * file-system probes of the search (faccessat, stat) are answered by this
 * file, so that the search can be checked candidate by candidate.
 *
 * Input: three control bytes, then sections separated by 0x01, items in a
 * section by 0x00: the program name, env, env_set, env_unset, cwd.  Control
 * byte 0 says which of env, env_set, env_unset, cwd and file (the program
 * name as o->file rather than argv[0]) are given; byte 1 the size of the
 * path buffer; byte 2 seeds what each probe finds (nothing, no permission,
 * an executable file, a directory).  Checked, beyond "no crash":
 *  - tdl__spawn_check_env refuses exactly what process.h says: an env_set
 *    entry without '=' or with an empty name, an env_unset name empty or
 *    holding '=';
 *  - tdl__spawn_env: unedited, the base environment itself and nothing to
 *    free; edited, every name of env_set exactly once, with its last value,
 *    no name of env_unset that env_set does not set again, every other base
 *    entry kept in its order, nothing else, and no string copied;
 *  - tdl__spawn_resolve probes exactly execvp's candidates, in order, each
 *    the child's working directory (for an empty or relative PATH entry),
 *    the entry and the name, skipping those that do not fit the buffer; the
 *    PATH is the child's environment's, or /bin:/usr/bin without one; the
 *    first executable regular file wins, else -EACCES if any match could
 *    not be run, else -ENOENT; a name with '/' is taken as is; the buffer
 *    (a block of exactly its size) is never overrun.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "process/process_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) ((x) ? (void)0 : (fprintf(stderr, "fuzz_spawn_env: failed: %s (line %d)\n", #x, __LINE__), abort()))

/* ---- the probes path.c makes, answered and recorded here ---- */

enum { NOTHING, DENIED, EXECUTABLE, DIRECTORY };

#define MAX_PROBES 4096

static struct {
  char *path[MAX_PROBES]; /* faccessat's, in order */
  int answer[MAX_PROBES];
  int n;
  int stats;   /* stat calls, each right after an EXECUTABLE or DIRECTORY probe */
  uint32_t rnd;
} probes;

static uint32_t next_rand(uint32_t *s)
{
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

static int probe_access(int fd, const char *path, int mode, int flags)
{
  CHECK(fd == AT_FDCWD && mode == X_OK && flags == AT_EACCESS);
  CHECK(probes.n < MAX_PROBES);
  int a = (int)(next_rand(&probes.rnd) % 4);
  probes.path[probes.n] = strdup(path);
  probes.answer[probes.n++] = a;
  errno = a == DENIED ? EACCES : ENOENT;
  return a == EXECUTABLE || a == DIRECTORY ? 0 : -1;
}

static int probe_stat(const char *path, struct stat *st)
{
  CHECK(probes.n > 0 && strcmp(path, probes.path[probes.n - 1]) == 0);
  int a = probes.answer[probes.n - 1];
  CHECK(a == EXECUTABLE || a == DIRECTORY);
  probes.stats++;
  memset(st, 0, sizeof *st);
  st->st_mode = a == EXECUTABLE ? S_IFREG | 0755 : S_IFDIR | 0755;
  return 0;
}

/* path.c itself, with its probes pointed at the two functions above. */
#define faccessat(fd, path, mode, flags) probe_access(fd, path, mode, flags)
#define stat(path, st) probe_stat(path, st)
#include "process/path.c"
#undef faccessat
#undef stat

/* ---- the input ---- */

enum { S_FILE, S_ENV, S_SET, S_UNSET, S_CWD, NSECTIONS };

/* A NULL-terminated list of the items of one section, each in a block of
 * its own size. */
static char **items(const char *p, size_t n)
{
  size_t count = 1;
  for (size_t i = 0; i < n; i++)
    count += p[i] == 0;
  char **v = calloc(count + 1, sizeof *v);
  size_t k = 0, start = 0;
  for (size_t i = 0; i <= n; i++) {
    if (i < n && p[i] != 0)
      continue;
    v[k] = malloc(i - start + 1);
    memcpy(v[k], p + start, i - start);
    v[k++][i - start] = 0;
    start = i + 1;
  }
  return v;
}

static void free_items(char **v)
{
  for (size_t i = 0; v && v[i]; i++)
    free(v[i]);
  free(v);
}

static size_t name_of(const char *entry)
{
  const char *eq = strchr(entry, '=');
  return eq ? (size_t)(eq - entry) : strlen(entry);
}

static bool same_name(const char *a, const char *b)
{
  size_t n = name_of(a);
  return n == name_of(b) && strncmp(a, b, n) == 0;
}

static bool in_list(char *const *list, const char *entry)
{
  for (; list && *list; list++)
    if (same_name(*list, entry))
      return true;
  return false;
}

/* ---- the properties ---- */

static int expected_check(char *const *set, char *const *unset)
{
  for (; set && *set; set++)
    if (!strchr(*set, '=') || (*set)[0] == '=')
      return -EINVAL;
  for (; unset && *unset; unset++)
    if (!(*unset)[0] || strchr(*unset, '='))
      return -EINVAL;
  return 0;
}

static void check_env(char *const *base, char *const *set, char *const *unset, char *const *envp, char **owned)
{
  if (!set && !unset) {
    CHECK(envp == base && owned == NULL);
    return;
  }
  CHECK(envp != NULL && (char **)envp == owned);
  size_t k = 0;
  /* The base entries neither set nor unset, in their order... */
  for (char *const *e = base; e && *e; e++)
    if (!in_list(unset, *e) && !in_list(set, *e))
      CHECK(envp[k++] == *e);
  /* ...then each name of env_set once, with its last value. */
  for (char *const *s = set; s && *s; s++) {
    size_t seen = 0;
    char *last = NULL;
    for (char *const *t = set; *t; t++)
      if (same_name(*s, *t))
        last = *t;
    for (char *const *e = envp; *e; e++)
      if (same_name(*e, *s)) {
        CHECK(*e == last);
        seen++;
      }
    CHECK(seen == 1);
  }
  size_t names = 0;
  for (char *const *s = set; s && *s; s++)
    names += !in_list(s + 1, *s);
  CHECK(envp[k + names] == NULL);
  for (size_t i = k; i < k + names; i++)
    CHECK(in_list(set, envp[i]));
}

static const char *env_path(char *const *envp)
{
  for (; envp && *envp; envp++)
    if (strncmp(*envp, "PATH=", 5) == 0)
      return *envp + 5;
  return NULL;
}

static void forget_probes(void)
{
  for (int i = 0; i < probes.n; i++)
    free(probes.path[i]);
  probes.n = probes.stats = 0;
}

static void check_resolve(const tdl_process_options *o, char *const *envp, size_t size, uint32_t seed)
{
  probes.rnd = seed * 2654435761u + 7;
  char *buf = malloc(size);
  int r = tdl__spawn_resolve(o, envp, buf, size);

  const char *file = o->file ? o->file : o->argv[0];
  size_t flen = strlen(file);
  if (!flen || strchr(file, '/') || flen > NAME_MAX) {
    CHECK(probes.n == 0);
    if (!flen)
      CHECK(r == -ENOENT);
    else if (!strchr(file, '/'))
      CHECK(r == -ENAMETOOLONG);
    else if (flen >= size)
      CHECK(r == -ENAMETOOLONG);
    else
      CHECK(r == 0 && strcmp(buf, file) == 0);
    free(buf);
    return;
  }
  bool own_env = o->env || o->env_set || o->env_unset;
  const char *path = own_env ? env_path(envp) : getenv("PATH");
  if (!path)
    path = "/bin:/usr/bin";
  /* The candidates, and what the probes found for them. */
  int k = 0, want = -ENOENT, stats = 0;
  const char *winner = NULL;
  size_t cap = strlen(path) + (o->cwd ? strlen(o->cwd) : 0) + flen + 3;
  char *cand = malloc(cap);
  for (const char *dir = path;;) {
    size_t dlen = strcspn(dir, ":");
    bool relative = dlen == 0 || dir[0] != '/';
    snprintf(cand, cap, "%s%s%.*s%s%s", o->cwd && relative ? o->cwd : "", o->cwd && relative ? "/" : "",
             (int)dlen, dir, dlen ? "/" : "", file);
    /* path.c keeps room for a '/' even after an empty entry, which has
     * none: such a candidate is tried only with a byte to spare. */
    if (strlen(cand) + (dlen == 0) < size) {
      CHECK(k < probes.n && strcmp(probes.path[k], cand) == 0);
      int a = probes.answer[k++];
      stats += a == EXECUTABLE || a == DIRECTORY;
      if (a == EXECUTABLE) {
        winner = probes.path[k - 1];
        break;
      }
      if (a != NOTHING)
        want = -EACCES;
    }
    if (!dir[dlen])
      break;
    dir += dlen + 1;
  }
  free(cand);
  CHECK(k == probes.n && stats == probes.stats);
  if (winner)
    CHECK(r == 0 && strcmp(buf, winner) == 0 && strlen(buf) < size);
  else
    CHECK(r == want);
  free(buf);
  forget_probes();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (size < 3)
    return 0;
  uint8_t ctl = data[0];
  size_t bufsize = data[1] < 0xf0 ? 1 + (size_t)data[1] : PATH_MAX;
  uint8_t seed = data[2];
  const char *p = (const char *)data + 3, *end = (const char *)data + size;
  char **sec[NSECTIONS] = {0};
  for (int i = 0; i < NSECTIONS; i++) {
    const char *q = memchr(p, 1, (size_t)(end - p));
    if (!q)
      q = end;
    sec[i] = items(p, (size_t)(q - p));
    p = q < end ? q + 1 : end;
  }

  char *argv[3] = {sec[S_FILE][0], (char *)"arg", NULL};
  tdl_process_options o;
  memset(&o, 0, sizeof o);
  o.argv = (const char *const *)argv;
  if (ctl & 1)
    o.file = sec[S_FILE][0];
  if (ctl & 2)
    o.env = (const char *const *)sec[S_ENV];
  if (ctl & 4)
    o.env_set = (const char *const *)sec[S_SET];
  if (ctl & 8)
    o.env_unset = (const char *const *)sec[S_UNSET];
  if (ctl & 16)
    o.cwd = sec[S_CWD][0];

  char *const *set = (char *const *)o.env_set, *const *unset = (char *const *)o.env_unset;
  int r = tdl__spawn_check_env(&o);
  CHECK(r == expected_check(set, unset));
  if (r == 0) {
    char *const *envp;
    char **owned;
    CHECK(tdl__spawn_env(&o, &envp, &owned) == 0);
    check_env(o.env ? (char *const *)o.env : environ, set, unset, envp, owned);
    check_resolve(&o, envp, bufsize, seed);
    free(owned);
  }
  for (int i = 0; i < NSECTIONS; i++)
    free_items(sec[i]);
  return 0;
}
