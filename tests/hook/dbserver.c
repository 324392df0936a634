/* SPDX-License-Identifier: MIT */
/* A database server of the test's own: see dbserver.h. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <glob.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dbserver.h"

/* Bound of every wait for the server (a hang, not a delay: valgrind and a
 * busy machine stretch a start of a second to several). */
#define BOUND_NS (60LL * 1000000000LL)

static long long now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void nap_ms(int ms)
{
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

/* A port free on 127.0.0.1 now (another process may take it before the
 * server binds it: a server that exits while starting is started again on
 * another). */
static int free_port(void)
{
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  int port = -1;
  if (s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(s, (struct sockaddr *)&a, &al) == 0)
    port = ntohs(a.sin_port);
  if (s >= 0)
    close(s);
  return port;
}

/* Whether path is an executable file. */
static int executable(const char *path) { return access(path, X_OK) == 0; }

/* `name` in $PATH (and the sbin directories, which a non-root PATH may
 * lack), into out. */
static int in_path(const char *name, char *out, size_t cap)
{
  const char *path = getenv("PATH");
  char all[1024];
  snprintf(all, sizeof all, "%s:/usr/sbin:/usr/local/sbin:/sbin", path ? path : "/usr/bin:/bin");
  for (char *save = NULL, *d = strtok_r(all, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
    if (snprintf(out, cap, "%s/%s", d, name) < (int)cap && executable(out))
      return 1;
  }
  return 0;
}

/* PostgreSQL's programs: Debian keeps them in /usr/lib/postgresql/N/bin
 * (the newest N), other systems in $PATH. */
static int find_postgres(char *postgres, char *initdb, size_t cap)
{
  glob_t g;
  int best = -1;
  long best_v = -1;
  if (glob("/usr/lib/postgresql/*/bin/postgres", 0, NULL, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; i++) {
      long v = strtol(g.gl_pathv[i] + strlen("/usr/lib/postgresql/"), NULL, 10);
      if (v > best_v && executable(g.gl_pathv[i])) {
        best_v = v;
        best = (int)i;
      }
    }
    if (best >= 0) {
      snprintf(postgres, cap, "%s", g.gl_pathv[best]);
      snprintf(initdb, cap, "%.*s/initdb", (int)(strlen(postgres) - strlen("/postgres")), postgres);
    }
    globfree(&g);
    if (best >= 0 && executable(initdb))
      return 1;
  }
  return in_path("postgres", postgres, cap) && in_path("initdb", initdb, cap);
}

static int find_mariadb(char *mariadbd, size_t cap)
{
  return in_path("mariadbd", mariadbd, cap) || in_path("mysqld", mariadbd, cap);
}

/* Who the server runs as: root is dropped to nobody (postgres refuses to
 * run as root, and a test's server needs no privilege); anyone else stays. */
typedef struct runas {
  int drop;
  uid_t uid;
  gid_t gid;
} runas;

static int who(runas *as, char *why, size_t why_len)
{
  as->drop = geteuid() == 0;
  if (!as->drop)
    return 0;
  struct passwd *pw = getpwnam("nobody");
  if (!pw) {
    snprintf(why, why_len, "running as root, and there is no user nobody to run the server as");
    return -1;
  }
  as->uid = pw->pw_uid;
  as->gid = pw->pw_gid;
  return 0;
}

/* Forks and execs argv[0] as `as`, its output to `log` (appended), its
 * other fds closed, killed when this process dies.  Everything the child
 * needs is made before the fork (the test process may have threads). */
static pid_t run(const runas *as, char *const argv[], char *const envp[], const char *log)
{
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid != 0)
    return pid;
  int out = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
  int in = open("/dev/null", O_RDONLY);
  if (out < 0 || in < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0)
    _exit(126);
#ifdef SYS_close_range
  if (syscall(SYS_close_range, 3U, ~0U, 0U) < 0)
#endif
    for (int fd = 3; fd < 1024; fd++)
      close(fd);
  if (as->drop && (setgroups(0, NULL) < 0 || setgid(as->gid) < 0 || setuid(as->uid) < 0))
    _exit(126);
  /* After setuid, which clears it. */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
    _exit(126);
  execve(argv[0], argv, envp);
  _exit(127);
}

/* Waits for pid until `until` (ns, CLOCK_MONOTONIC): its wait status, or -1
 * when it is still running then. */
static int wait_until(pid_t pid, long long until)
{
  for (;;) {
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid)
      return st;
    if (r < 0 && errno != EINTR)
      return 0; /* not ours any more: nothing to wait for */
    if (now_ns() >= until)
      return -1;
    nap_ms(5);
  }
}

static void show_log(const char *path)
{
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  char line[512];
  fprintf(stderr, "---- %s ----\n", path);
  while (fgets(line, sizeof line, f))
    fputs(line, stderr);
  fprintf(stderr, "---- end of %s ----\n", path);
  fclose(f);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
  (void)st;
  (void)ftw;
  if (flag == FTW_DP)
    rmdir(path);
  else
    unlink(path);
  return 0;
}

/* Runs one program to its end (initdb): 0 when it exits 0. */
static int run_to_end(const runas *as, char *const argv[], char *const envp[], const char *log)
{
  pid_t pid = run(as, argv, envp, log);
  if (pid < 0)
    return -1;
  int st = wait_until(pid, now_ns() + BOUND_NS);
  if (st == -1) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* The directories of earlier runs that were killed (a ctest timeout's
 * SIGKILL leaves no teardown; the server dies with its process): each
 * names its process in owner.pid. */
static void remove_orphans(void)
{
  static const char *const patterns[] = {"/tmp/tdl-pg-*/owner.pid", "/tmp/tdl-maria-*/owner.pid"};
  for (int p = 0; p < 2; p++) {
    glob_t g;
    if (glob(patterns[p], 0, NULL, &g) != 0)
      continue;
    for (size_t i = 0; i < g.gl_pathc; i++) {
      FILE *f = fopen(g.gl_pathv[i], "r");
      long pid = 0;
      int known = f && fscanf(f, "%ld", &pid) == 1 && pid > 0;
      if (f)
        fclose(f);
      if (known && kill((pid_t)pid, 0) < 0 && errno == ESRCH) {
        *strrchr(g.gl_pathv[i], '/') = '\0'; /* the directory */
        nftw(g.gl_pathv[i], rm_one, 16, FTW_DEPTH | FTW_PHYS);
      }
    }
    globfree(&g);
  }
}

int t_db_start(t_db *db, t_db_kind kind, int (*ready)(const t_db *db), char *why, size_t why_len)
{
  memset(db, 0, sizeof *db);
  db->kind = kind;
  db->pid = -1;
  char prog[256], initdb[256];
  if (kind == T_DB_POSTGRES ? !find_postgres(prog, initdb, sizeof prog) : !find_mariadb(prog, sizeof prog)) {
    snprintf(why, why_len, "%s is not installed (Debian: %s)", kind == T_DB_POSTGRES ? "PostgreSQL" : "MariaDB",
             kind == T_DB_POSTGRES ? "postgresql" : "mariadb-server");
    return T_DB_MISSING;
  }
  runas as;
  if (who(&as, why, why_len) < 0)
    return -1;
  remove_orphans();
  snprintf(db->dir, sizeof db->dir, "/tmp/tdl-%s-XXXXXX", kind == T_DB_POSTGRES ? "pg" : "maria");
  if (!mkdtemp(db->dir)) {
    snprintf(why, why_len, "mkdtemp: %s", strerror(errno));
    db->dir[0] = '\0';
    return -1;
  }
  char data[96], log[96];
  snprintf(log, sizeof log, "%s/owner.pid", db->dir);
  FILE *owner = fopen(log, "w");
  if (owner) {
    fprintf(owner, "%ld\n", (long)getpid());
    fclose(owner);
  }
  snprintf(data, sizeof data, "%s/data", db->dir);
  snprintf(log, sizeof log, "%s/server.log", db->dir);
  if (kind == T_DB_MARIADB && mkdir(data, 0700) < 0) {
    snprintf(why, why_len, "mkdir %s: %s", data, strerror(errno));
    return -1;
  }
  if (as.drop && (chown(db->dir, as.uid, as.gid) < 0 || (kind == T_DB_MARIADB && chown(data, as.uid, as.gid) < 0))) {
    snprintf(why, why_len, "chown %s: %s", db->dir, strerror(errno));
    return -1;
  }
  char *envp[] = {"LC_ALL=C", "PATH=/usr/bin:/bin", "HOME=/nonexistent", NULL};
  if (kind == T_DB_POSTGRES) {
    snprintf(db->sock, sizeof db->sock, "%s", db->dir);
    /* trust: no password; --no-sync: a test's data need not reach the disk. */
    char *argv[] = {initdb, "-D", data, "-U", T_DB_USER, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", NULL};
    if (run_to_end(&as, argv, envp, log) < 0) {
      show_log(log);
      snprintf(why, why_len, "initdb failed (its output is above)");
      return -1;
    }
  } else {
    snprintf(db->sock, sizeof db->sock, "%s/mysqld.sock", db->dir);
  }
  /* The port may be taken between free_port and the server's bind: then
   * the server exits, and starts again on another. */
  for (int attempt = 0; attempt < 3; attempt++) {
    db->port = free_port();
    if (db->port < 0) {
      snprintf(why, why_len, "no free port on 127.0.0.1");
      return -1;
    }
    char port[16], opt[8][128];
    snprintf(port, sizeof port, "%d", db->port);
    pid_t pid;
    if (kind == T_DB_POSTGRES) {
      /* -k: the Unix socket in the directory; nothing written to disk that
       * a test would miss; no background work. */
      char *argv[] = {prog, "-D", data, "-k", db->dir, "-p", port, "-c", "listen_addresses=127.0.0.1",
                      "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                      "-c", "autovacuum=off", "-c", "max_connections=150", "-c", "shared_buffers=16MB",
                      "-c", "dynamic_shared_memory_type=mmap", "-c", "jit=off", NULL};
      pid = run(&as, argv, envp, log);
    } else {
      /* No grant tables (an empty data directory: no mariadb-install-db,
       * which takes seconds): every user may do everything, which is what
       * a test wants.  No binary log, small InnoDB files. */
      snprintf(opt[0], sizeof opt[0], "--datadir=%s", data);
      snprintf(opt[1], sizeof opt[1], "--socket=%s", db->sock);
      snprintf(opt[2], sizeof opt[2], "--port=%s", port);
      snprintf(opt[3], sizeof opt[3], "--pid-file=%s/mysqld.pid", db->dir);
      snprintf(opt[4], sizeof opt[4], "--log-error=%s", log);
      snprintf(opt[5], sizeof opt[5], "--tmpdir=%s", db->dir);
      char *argv[] = {prog, "--no-defaults", opt[0], opt[1], opt[2], opt[3], opt[4], opt[5],
                      "--bind-address=127.0.0.1", "--skip-grant-tables", "--skip-name-resolve",
                      "--skip-log-bin", "--innodb-buffer-pool-size=16M", "--innodb-log-file-size=8M",
                      "--innodb-use-native-aio=OFF", "--max-connections=150", NULL};
      pid = run(&as, argv, envp, log);
    }
    if (pid < 0) {
      snprintf(why, why_len, "fork: %s", strerror(errno));
      return -1;
    }
    db->pid = pid;
    long long until = now_ns() + BOUND_NS;
    int exited = 0;
    while (now_ns() < until) {
      int st;
      if (waitpid(pid, &st, WNOHANG) == pid) {
        exited = 1;
        db->pid = -1;
        break;
      }
      if (ready(db))
        return 0;
      nap_ms(20);
    }
    if (!exited) {
      show_log(log);
      snprintf(why, why_len, "the server did not answer within %lld s (its log is above)", BOUND_NS / 1000000000LL);
      return -1;
    }
  }
  show_log(log);
  snprintf(why, why_len, "the server exited while starting, three times (its log is above)");
  return -1;
}

void t_db_stop(t_db *db)
{
  if (db->pid > 0) {
    /* PostgreSQL: SIGINT is the fast shutdown (SIGTERM would wait for the
     * clients); MariaDB: SIGTERM. */
    kill(db->pid, db->kind == T_DB_POSTGRES ? SIGINT : SIGTERM);
    if (wait_until(db->pid, now_ns() + BOUND_NS / 2) == -1) {
      kill(db->pid, SIGKILL);
      waitpid(db->pid, NULL, 0);
    }
    db->pid = -1;
  }
  if (db->dir[0]) {
    nftw(db->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    db->dir[0] = '\0';
  }
}
