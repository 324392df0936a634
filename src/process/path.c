/* SPDX-License-Identifier: MIT */
/*
 * What tdl_process_spawn decides before the child exists: the child's
 * environment, and where its program is (execvp's PATH search, done by the
 * parent so that the child only calls execve).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "process/process_internal.h"

extern char **environ;

/* ---- environment --------------------------------------------------------------- */

static size_t name_len(const char *entry)
{
  const char *eq = strchr(entry, '=');
  return eq ? (size_t)(eq - entry) : strlen(entry);
}

int tdl__spawn_check_env(const tdl_process_options *o)
{
  for (const char *const *e = o->env_set; e && *e; e++)
    if (!strchr(*e, '=') || **e == '=')
      return -EINVAL;
  for (const char *const *e = o->env_unset; e && *e; e++)
    if (**e == '\0' || strchr(*e, '='))
      return -EINVAL;
  return 0;
}

static bool named(const char *entry, const char *name, size_t len)
{
  return strncmp(entry, name, len) == 0 && entry[len] == '=';
}

static bool listed(const char *const *list, const char *entry, bool list_has_values)
{
  size_t len = name_len(entry);
  for (; list && *list; list++) {
    size_t l = list_has_values ? name_len(*list) : strlen(*list);
    if (l == len && strncmp(*list, entry, len) == 0)
      return true;
  }
  return false;
}

/* Only the edited case allocates; the strings themselves are never copied. */
int tdl__spawn_env(const tdl_process_options *o, char *const **envp, char ***owned)
{
  char *const *base = o->env ? (char *const *)o->env : environ;
  *owned = NULL;
  if (!o->env_set && !o->env_unset) {
    *envp = base;
    return 0;
  }
  size_t n = 0, nset = 0;
  for (char *const *e = base; e && *e; e++)
    n++;
  for (const char *const *e = o->env_set; e && *e; e++)
    nset++;
  char **v = TDL__FAULT_ALLOC(malloc((n + nset + 1) * sizeof *v));
  if (!v)
    return -ENOMEM;
  size_t k = 0;
  for (char *const *e = base; e && *e; e++)
    if (!listed(o->env_unset, *e, false) && !listed(o->env_set, *e, true))
      v[k++] = *e;
  for (size_t i = 0; i < nset; i++) /* a later duplicate in env_set wins */
    if (!listed(o->env_set + i + 1, o->env_set[i], true))
      v[k++] = (char *)o->env_set[i];
  v[k] = NULL;
  *envp = v;
  *owned = v;
  return 0;
}

static const char *env_get(char *const *envp, const char *name)
{
  size_t len = strlen(name);
  for (; envp && *envp; envp++)
    if (named(*envp, name, len))
      return *envp + len + 1;
  return NULL;
}

/* ---- the program ------------------------------------------------------------------ */

/* execvp's search, done before the child exists.  Like execvp, a match that
 * exists but cannot be executed is skipped and reported as EACCES only if no
 * later entry matches.  Unlike execvp, nothing is ever run through /bin/sh. */
static int resolve(const char *file, const char *path_env, const char *cwd, char *buf, size_t size)
{
  if (file[0] == '\0')
    return -ENOENT;
  if (strchr(file, '/')) {
    if (strlen(file) >= size)
      return -ENAMETOOLONG;
    strcpy(buf, file);
    return 0;
  }
  size_t flen = strlen(file);
  if (flen > NAME_MAX)
    return -ENAMETOOLONG;
  if (!path_env)
    path_env = "/bin:/usr/bin";
  int err = -ENOENT;
  for (const char *dir = path_env;; dir++) {
    const char *end = strchrnul(dir, ':');
    size_t dlen = (size_t)(end - dir);
    /* An empty entry is the working directory; relative entries are taken
     * from the child's working directory, where the child will look. */
    size_t clen = (cwd && (dlen == 0 || dir[0] != '/')) ? strlen(cwd) + 1 : 0;
    if (clen + dlen + 1 + flen < size) {
      char *w = buf;
      if (clen) {
        memcpy(w, cwd, clen - 1);
        w[clen - 1] = '/';
        w += clen;
      }
      memcpy(w, dir, dlen);
      w += dlen;
      if (dlen)
        *w++ = '/';
      memcpy(w, file, flen + 1);
      if (faccessat(AT_FDCWD, buf, X_OK, AT_EACCESS) == 0) {
        struct stat st;
        if (stat(buf, &st) == 0 && S_ISREG(st.st_mode))
          return 0;
        err = -EACCES;
      } else if (errno == EACCES) {
        err = -EACCES;
      }
    }
    if (*end == '\0')
      break;
    dir = end;
  }
  return err;
}

int tdl__spawn_resolve(const tdl_process_options *o, char *const *envp, char *buf, size_t size)
{
  bool own_env = o->env || o->env_set || o->env_unset;
  const char *path_env = own_env ? env_get(envp, "PATH") : getenv("PATH");
  return resolve(o->file ? o->file : o->argv[0], path_env, o->cwd, buf, size);
}
