/* SPDX-License-Identifier: MIT */
/* Looking inside: every fiber of a loop, what it waits on, its stack. */
#include <string.h>
#include <unistd.h>

#include "base/sys.h"
#include "fiber/fiber_internal.h"

static const char *state_name(const tdl__fiber *f)
{
  switch (f->state) {
  case TDL__FIBER_RUNNING: return "running";
  case TDL__FIBER_RUNNABLE: return "runnable";
  case TDL__FIBER_PARKED: return "parked";
  default: return "finished";
  }
}

void tdl__fiber_info_get(const tdl__fiber *f, tdl_fiber_info *in)
{
  bool parked = f->state == TDL__FIBER_PARKED;
  *in = (tdl_fiber_info){
      .handle = tdl__fiber_handle(f),
      .id = f->id,
      .name = f->name,
      .state = state_name(f),
      .waits_on = parked ? f->waits_on : "",
      .fd = parked ? f->wait_fd : -1,
      .deadline = parked ? f->deadline : TDL_FOREVER,
      .stack_size = f->stack.size,
      .stack_used = tdl__stack_used(&f->stack),
      .guarded = f->stack.guard != 0,
  };
}

int tdl_fiber_foreach(tdl_loop *loop, int (*fn)(const tdl_fiber_info *, void *), void *ctx)
{
  tdl__sched *s = loop->sched;
  int n = 0;
  if (!s)
    return 0;
  TDL__LIST_FOREACH(node, &s->all) {
    tdl_fiber_info in;
    tdl__fiber_info_get(TDL__CONTAINER_OF(node, tdl__fiber, all), &in);
    n++;
    if (fn(&in, ctx))
      break;
  }
  return n;
}

/* Formats without stdio so that a dump from a crash path cannot deadlock on
 * a stdio lock or allocate. */
static char *put_str(char *p, char *end, const char *s)
{
  while (*s && p < end)
    *p++ = *s++;
  return p;
}

static char *put_num(char *p, char *end, int64_t v)
{
  char tmp[24];
  int n = 0;
  bool neg = v < 0;
  uint64_t u = neg ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
  do {
    tmp[n++] = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (neg && p < end)
    *p++ = '-';
  while (n && p < end)
    *p++ = tmp[--n];
  return p;
}

char *tdl__fiber_info_line(char *p, char *end, const tdl_fiber_info *in)
{
  p = put_str(p, end, "fiber ");
  p = put_num(p, end, (int64_t)in->id);
  p = put_str(p, end, " \"");
  p = put_str(p, end, in->name);
  p = put_str(p, end, "\" ");
  p = put_str(p, end, in->state);
  if (in->waits_on[0]) {
    p = put_str(p, end, " on ");
    p = put_str(p, end, in->waits_on);
    if (in->fd >= 0) {
      p = put_str(p, end, " fd ");
      p = put_num(p, end, in->fd);
    }
    if (in->deadline != TDL_FOREVER) {
      p = put_str(p, end, " until ");
      p = put_num(p, end, in->deadline);
    }
  }
  p = put_str(p, end, " stack ");
  p = put_num(p, end, (int64_t)in->stack_used);
  p = put_str(p, end, "/");
  p = put_num(p, end, (int64_t)in->stack_size);
  return put_str(p, end, in->guarded ? " guarded\n" : " unguarded\n");
}

int tdl__fiber_write_all(int fd, const char *buf, size_t len)
{
  while (len > 0) {
    ssize_t w = tdl__sys_write(fd, buf, len);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    buf += w;
    len -= (size_t)w;
  }
  return 0;
}

static int dump_one(const tdl_fiber_info *in, void *ctx)
{
  const int *fd = ctx;
  char line[256];
  char *p = tdl__fiber_info_line(line, line + sizeof line - 1, in);
  return tdl__fiber_write_all(*fd, line, (size_t)(p - line)) < 0;
}

int tdl_fiber_dump(tdl_loop *loop, int fd)
{
  return tdl_fiber_foreach(loop, dump_one, &fd);
}

void tdl_fiber_stats_get(tdl_loop *loop, tdl_fiber_stats *out)
{
  memset(out, 0, sizeof *out);
  tdl__sched *s = loop->sched;
  if (!s)
    return;
  tdl__stack_stats st;
  tdl__stack_pool_stats(&s->pool, &st);
  out->live = s->live;
  out->unguarded = st.in_use_unguarded;
  out->stacks_cached = st.cached;
}
