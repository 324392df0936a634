// SPDX-License-Identifier: MIT
//
// bench-boost-fiber: the Boost.Fiber peer (Debian's libboost-fiber-dev) of
// treadle-bench's fiber workloads (docs/BENCHMARKS.md), with the same
// command line and the same RESULT line (../../common/bench.h):
//
//   bench-boost-fiber ring  --threads 503 --hops T [--via wake|chan]
//   bench-boost-fiber chan  --hops T [--chan unbuffered|buffered]
//   bench-boost-fiber fiber-spawn --fibers N --batch B [--stack S]
//   bench-boost-fiber idle  --fibers F [--park chan|read] [--stack S]
//   bench-boost-fiber echo-server [--listen ADDR]   (prints PORT n, serves until stdin ends)
//   bench-boost-fiber http-server [--listen ADDR]   (the same for HTTP: http_server.cpp)
//
// Everything runs on the process's one thread.  Without I/O (ring, chan,
// fiber-spawn, idle --park chan) on Boost.Fiber's own scheduler
// (algo::round_robin, the default); with I/O (idle --park read,
// echo-server, http-server) on Boost.Asio, as Boost.Fiber's documentation
// pairs them (asio_fiber.hpp).  Stacks: Boost.Fiber's default (fixedsize_stack,
// 128 KiB here), or fixedsize_stack of --stack bytes.  impl is
// "boost-fiber".  A run that fails its own check exits 1 without a RESULT
// line.

#include "asio_fiber.hpp"

extern "C" {
#include "bench.h"
}

#include <array>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

namespace asio = boost::asio;
namespace fibers = boost::fibers;
using boost::system::error_code;

int boost_fiber_http_server_main(int argc, char **argv); // http_server.cpp

namespace {

const char *IMPL = "boost-fiber";

// A fiber with --stack bytes of stack (0: the library's default).
template <typename Fn, typename... Args> fibers::fiber make_fiber(long stack, Fn &&fn, Args &&...args)
{
  if (stack > 0)
    return fibers::fiber(std::allocator_arg, fibers::fixedsize_stack((std::size_t)stack), std::forward<Fn>(fn),
                         std::forward<Args>(args)...);
  return fibers::fiber(std::forward<Fn>(fn), std::forward<Args>(args)...);
}

double now_s()
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

// ---- ring: a token around N fibers ------------------------------------------
//
// The count of hops left is the token: the holder of v stops the run if v
// is 0, else passes v - 1 on (a hop).  So T hops are made and the run ends
// at fiber T mod N; both are checked.
//   --via wake: Boost.Fiber has no park/unpark of a given fiber; its way to
//     wake one is a condition variable: a fibers::mutex, a
//     fibers::condition_variable and a flag per fiber, set and notified by
//     its predecessor.  The token count lives in a variable of the ring.
//   --via chan: an unbuffered_channel<long> between neighbours carrying the
//     count (the Benchmarks Game form).
struct member {
  fibers::mutex m;
  fibers::condition_variable cv;
  bool woken = false;
};

int ring_main(int argc, char **argv)
{
  int n = (int)bench_opt_long(argc, argv, "threads", 503);
  long hops = bench_opt_long(argc, argv, "hops", 10000000);
  std::string via = bench_opt_str(argc, argv, "via", "wake");
  long passed = 0;
  int finisher = -1;
  std::vector<fibers::fiber> fs;
  fs.reserve((size_t)n);
  bench_span s;
  if (via == "wake") {
    std::vector<member> ms((size_t)n);
    long token = 0;
    bool done = false;
    auto wake = [](member &m) {
      {
        std::unique_lock<fibers::mutex> lk(m.m);
        m.woken = true;
      }
      m.cv.notify_one();
    };
    for (int i = 0; i < n; i++)
      fs.emplace_back([&, i] {
        member &me = ms[(size_t)i], &next = ms[(size_t)((i + 1) % n)];
        for (;;) {
          {
            std::unique_lock<fibers::mutex> lk(me.m);
            me.cv.wait(lk, [&] { return me.woken; });
            me.woken = false;
          }
          if (done)
            return;
          if (token == 0) {
            finisher = i;
            done = true;
            for (int k = 0; k < n; k++)
              if (k != i)
                wake(ms[(size_t)k]);
            return;
          }
          token--;
          passed++;
          wake(next);
        }
      });
    boost::this_fiber::yield(); // every member runs to its first wait
    bench_begin(&s);
    token = hops;
    wake(ms[0]); // hands the token over: not a hop
    for (auto &f : fs)
      f.join();
    bench_end(&s);
  } else {
    std::vector<std::unique_ptr<fibers::unbuffered_channel<long>>> ch;
    for (int i = 0; i < n; i++)
      ch.push_back(std::make_unique<fibers::unbuffered_channel<long>>());
    for (int i = 0; i < n; i++)
      fs.emplace_back([&, i] {
        auto &in = *ch[(size_t)i], &out = *ch[(size_t)((i + 1) % n)];
        long v;
        while (in.pop(v) == fibers::channel_op_status::success) {
          if (v == 0) {
            finisher = i;
            for (auto &c : ch)
              c->close();
            return;
          }
          passed++;
          if (out.push(v - 1) != fibers::channel_op_status::success)
            return;
        }
      });
    boost::this_fiber::yield();
    bench_begin(&s);
    ch[0]->push(hops);
    for (auto &f : fs)
      f.join();
    bench_end(&s);
  }
  if (passed != hops || finisher != (int)(hops % n)) {
    fprintf(stderr, "ring: FAILED: %ld hops of %ld, stopped at fiber %d (expected %ld)\n", passed, hops, finisher,
            hops % n);
    return 1;
  }
  bench_result(IMPL, "ring", &s, "threads=%d hops=%ld via=%s ns_per_hop=%.2f cpu_ns_per_hop=%.2f", n, hops,
               via.c_str(), s.wall_s * 1e9 / (double)hops, (s.user_s + s.sys_s) * 1e9 / (double)hops);
  return 0;
}

// ---- chan: ping-pong over a channel -------------------------------------------
//
// --chan unbuffered: one unbuffered_channel<long>, both ways (a push waits
// for its pop), as treadle's workload does with its unbuffered channel.
// --chan buffered: a buffered_channel<long> of capacity 2 (Boost.Fiber's
// smallest) per direction.  A hop is one push and its pop; every value is
// checked, and so is the count.
int chan_main(int argc, char **argv)
{
  long hops = bench_opt_long(argc, argv, "hops", 10000000);
  std::string kind = bench_opt_str(argc, argv, "chan", "unbuffered");
  long seen = 0;
  const char *failed = nullptr;
  bench_span s;
  auto run = [&](auto &ab, auto &ba) {
    fibers::fiber pong([&] {
      long got;
      for (long v = 1; v <= hops; v += 2) {
        if (ab.pop(got) != fibers::channel_op_status::success || got != v - 1) {
          failed = "pong got a wrong value";
          return;
        }
        seen++;
        if (v < hops)
          ba.push(v);
      }
    });
    fibers::fiber ping([&] {
      long got;
      for (long v = 0; v < hops; v += 2) {
        ab.push(v);
        if (v + 1 < hops) {
          if (ba.pop(got) != fibers::channel_op_status::success || got != v + 1) {
            failed = "ping got a wrong value";
            return;
          }
          seen++;
        }
      }
    });
    bench_begin(&s);
    pong.join();
    ping.join();
    bench_end(&s);
  };
  if (kind == "unbuffered") {
    fibers::unbuffered_channel<long> ch;
    run(ch, ch);
  } else {
    fibers::buffered_channel<long> ab(2), ba(2);
    run(ab, ba);
  }
  if (failed || seen != hops) {
    fprintf(stderr, "chan: FAILED: %s; %ld hops of %ld\n", failed ? failed : "-", seen, hops);
    return 1;
  }
  bench_result(IMPL, "chan", &s, "hops=%ld chan=%s ns_per_hop=%.2f cpu_ns_per_hop=%.2f", hops, kind.c_str(),
               s.wall_s * 1e9 / (double)hops, (s.user_s + s.sys_s) * 1e9 / (double)hops);
  return 0;
}

// ---- fiber-spawn: start and join N fibers, B at a time ----------------------
//
// main starts B fibers, then joins each in turn, until N have run.  Fiber i
// adds i + 1 to a sum (a Boost.Fiber fiber returns nothing: fibers::async
// and a future would add a shared state per fiber), checked against
// N (N + 1) / 2.
int fiber_spawn_main(int argc, char **argv)
{
  long n = bench_opt_long(argc, argv, "fibers", 1000000);
  long batch = bench_opt_long(argc, argv, "batch", 1000);
  long stack = bench_opt_long(argc, argv, "stack", 0);
  uint64_t sum = 0;
  std::vector<fibers::fiber> fs;
  fs.reserve((size_t)batch);
  bench_span s;
  bench_begin(&s);
  for (long done = 0; done < n;) {
    long k = n - done < batch ? n - done : batch;
    for (long i = 0; i < k; i++)
      fs.push_back(make_fiber(stack, [&sum](uint64_t v) { sum += v; }, (uint64_t)(done + i + 1)));
    for (auto &f : fs)
      f.join();
    fs.clear();
    done += k;
  }
  bench_end(&s);
  uint64_t want = (uint64_t)n * (uint64_t)(n + 1) / 2;
  if (sum != want) {
    fprintf(stderr, "fiber-spawn: FAILED: the fibers added up to %llu, expected %llu\n", (unsigned long long)sum,
            (unsigned long long)want);
    return 1;
  }
  bench_result(IMPL, "fiber-spawn", &s, "fibers=%ld batch=%ld stack=%ld fibers_per_s=%.0f cpu_ns_per_fiber=%.1f", n,
               batch, stack, (double)n / s.wall_s, (s.user_s + s.sys_s) * 1e9 / (double)n);
  return 0;
}

// ---- idle: memory per blocked fiber -----------------------------------------
//
// F fibers (detached), each blocked for good: on a pop from one shared
// unbuffered_channel<int> (--park chan, on Boost.Fiber's own scheduler), or
// in an async_read_some of a pipe of its own through Boost.Asio
// (--park read: a posix::stream_descriptor made by the fiber, so that
// Asio's per-descriptor state counts).  bytes_per_fiber = (VmRSS with all F
// blocked - VmRSS before starting them) * 1024 / F.  Then all are woken at
// once (the channel closed, or a byte written to every pipe, checked by its
// reader) and timed until the last has run: wake_ns, per fiber.
int idle_main(int argc, char **argv)
{
  long n = bench_opt_long(argc, argv, "fibers", 100000);
  long stack = bench_opt_long(argc, argv, "stack", 0);
  std::string park = bench_opt_str(argc, argv, "park", "chan");
  bool read_mode = park == "read";
  long blocked = 0, woken = 0, blocked_at_measure = 0;
  const char *failed = nullptr;
  double bytes_per_fiber = 0, wake_ns = 0;
  std::vector<std::array<int, 2>> pipes;
  asio::io_context *io = nullptr; // never freed: the scheduler, which outlives main, holds on to it
  if (read_mode) {
    bench_raise_nofile();
    pipes.resize((size_t)n);
    for (auto &p : pipes)
      if (pipe(p.data()) != 0)
        bench_die("pipe %zu of %ld: %s", (size_t)(&p - pipes.data()), n, strerror(errno));
    io = new asio::io_context(1);
    bf_asio::round_robin::install(*io);
  }
  fibers::unbuffered_channel<int> ch;
  // The last fiber to wake tells the controller (which must not spin on
  // yield: with Asio, I/O is polled only when no fiber is ready).
  fibers::mutex m;
  fibers::condition_variable all_woken;
  auto woke = [&] {
    blocked--;
    if (++woken == n) {
      std::unique_lock<fibers::mutex> lk(m);
      all_woken.notify_one();
    }
  };

  long before = bench_rss_kb();
  bench_span s;
  bench_begin(&s);
  for (long i = 0; i < n; i++) {
    if (read_mode)
      make_fiber(stack, [&, i] {
        asio::posix::stream_descriptor sd(*io, pipes[(size_t)i][0]);
        char buf[64];
        error_code ec;
        blocked++;
        size_t got = sd.async_read_some(asio::buffer(buf), bf_asio::yield[ec]);
        if (ec || got != 1 || buf[0] != 'w')
          failed = "a read did not get its byte";
        woke();
        sd.release(); // the pipe is closed by main
      }).detach();
    else
      make_fiber(stack, [&] {
        int v;
        blocked++;
        if (ch.pop(v) != fibers::channel_op_status::closed)
          failed = "a receive returned a value";
        woke();
      }).detach();
  }
  fibers::fiber controller([&] {
    // The ready queue is first in, first out: one yield lets every new
    // fiber run to its wait.
    for (int k = 0; k < 100 && blocked < n; k++)
      boost::this_fiber::yield();
    boost::this_fiber::sleep_for(std::chrono::milliseconds(10));
    blocked_at_measure = blocked;
    bytes_per_fiber = (double)(bench_rss_kb() - before) * 1024.0 / (double)n;
    double t0 = now_s();
    if (read_mode) {
      for (auto &p : pipes)
        if (write(p[1], "w", 1) != 1)
          bench_die("write: %s", strerror(errno));
    } else {
      ch.close();
    }
    {
      std::unique_lock<fibers::mutex> lk(m);
      all_woken.wait(lk, [&] { return woken == n; });
    }
    wake_ns = (now_s() - t0) * 1e9 / (double)n;
    if (io)
      io->stop();
  });
  if (io)
    bf_asio::round_robin::run();
  controller.join();
  bench_end(&s);
  if (failed || blocked_at_measure != n || woken != n) {
    fprintf(stderr, "idle: FAILED: %s; %ld of %ld blocked, %ld woken\n", failed ? failed : "-", blocked_at_measure,
            n, woken);
    return 1;
  }
  bench_result(IMPL, "idle", &s, "fibers=%ld park=%s stack=%ld bytes_per_fiber=%.0f wake_ns=%.0f", n, park.c_str(),
               stack, bytes_per_fiber, wake_ns);
  for (auto &p : pipes) {
    close(p[0]);
    close(p[1]);
  }
  return 0;
}

// ---- echo-server -----------------------------------------------------------
//
// The peer of treadle-bench's echo-server (docs/BENCHMARKS.md, "echo"),
// with the same contract: listen (default 127.0.0.1:0), print "PORT n",
// serve until stdin reaches end of file, then print "SERVED conns=N
// bytes=B" and exit 0.  Boost.Fiber over Boost.Asio on one thread: an
// acceptor fiber, a fiber per connection echoing what arrives
// (async_read_some into a 16 KiB buffer, async_write of all of it, each
// suspending its fiber with bf_asio::yield), TCP_NODELAY on every
// connection.
constexpr size_t SERVER_BUF = 16 * 1024;
long accepted;
long long echoed;

void serve(asio::ip::tcp::socket sock)
{
  std::unique_ptr<char[]> buf(new char[SERVER_BUF]);
  for (;;) {
    error_code ec;
    size_t n = sock.async_read_some(asio::buffer(buf.get(), SERVER_BUF), bf_asio::yield[ec]);
    if (ec) // the client closed
      break;
    asio::async_write(sock, asio::buffer(buf.get(), n), bf_asio::yield[ec]);
    if (ec)
      break;
    echoed += (long long)n;
  }
}

int echo_server_main(int argc, char **argv)
{
  std::string listen_at = bench_opt_str(argc, argv, "listen", "127.0.0.1:0");
  size_t colon = listen_at.rfind(':');
  error_code ec;
  asio::ip::address addr = asio::ip::make_address(listen_at.substr(0, colon == std::string::npos ? 0 : colon), ec);
  char *end = nullptr;
  long port = colon == std::string::npos ? -1 : strtol(listen_at.c_str() + colon + 1, &end, 10);
  if (ec || port < 0 || port > 65535 || *end)
    bench_die("echo-server: --listen wants HOST:PORT, not '%s'", listen_at.c_str());
  bench_raise_nofile();
  asio::io_context io(1);
  bf_asio::round_robin::install(io);
  asio::ip::tcp::acceptor acceptor(io, asio::ip::tcp::endpoint(addr, (unsigned short)port));
  printf("PORT %d\n", acceptor.local_endpoint().port());
  fflush(stdout);
  fprintf(stderr, "echo-server: Boost %d.%d, Asio %d, listening on port %d\n", BOOST_VERSION / 100000,
          BOOST_VERSION / 100 % 1000, BOOST_ASIO_VERSION, acceptor.local_endpoint().port());

  fibers::fiber([&] { // serves until stdin ends: the driver's way to stop the server
    asio::posix::stream_descriptor in(io, ::dup(0));
    char b[256];
    error_code e;
    while (!e)
      in.async_read_some(asio::buffer(b), bf_asio::yield[e]);
    printf("SERVED conns=%ld bytes=%lld\n", accepted, echoed);
    fflush(stdout);
    _exit(0);
  }).detach();
  fibers::fiber([&] {
    for (;;) {
      asio::ip::tcp::socket sock(io);
      error_code e;
      acceptor.async_accept(sock, bf_asio::yield[e]);
      if (e) {
        fprintf(stderr, "echo-server: accept: %s\n", e.message().c_str());
        continue;
      }
      sock.set_option(asio::ip::tcp::no_delay(true), e);
      accepted++;
      fibers::fiber(serve, std::move(sock)).detach();
    }
  }).detach();
  bf_asio::round_robin::run();
  return 1; // not reached: the stdin fiber ends the process
}

const bench_opt ring_opts[] = {
    {"threads", "N", 2, 1000000, "fibers in the ring (default 503)"},
    {"hops", "N", 1, LONG_MAX, "token passes T (default 10000000)"},
    {"via", "wake|chan", 0, 0, "a condition variable per fiber, or an unbuffered channel per neighbour (default wake)"},
    {},
};
const bench_opt chan_opts[] = {
    {"hops", "N", 1, LONG_MAX, "ping-pong hops T (default 10000000)"},
    {"chan", "unbuffered|buffered", 0, 0,
     "one unbuffered_channel both ways, or a buffered_channel of capacity 2 each way (default unbuffered)"},
    {},
};
const bench_opt spawn_opts[] = {
    {"fibers", "N", 1, LONG_MAX, "fibers N to start and join in all (default 1000000)"},
    {"batch", "N", 1, 1000000, "fibers B started before the first of them is joined (default 1000)"},
    {"stack", "N", 0, 1L << 30, "stack size in bytes (default 0: Boost's default, fixedsize_stack of 128 KiB)"},
    {},
};
const bench_opt idle_opts[] = {
    {"fibers", "N", 1, LONG_MAX, "fibers F, each blocked for good (default 100000)"},
    {"park", "chan|read", 0, 0,
     "where each waits: a pop from one shared unbuffered_channel, or an Asio read of a pipe of its own "
     "(default chan)"},
    {"stack", "N", 0, 1L << 30, "stack size in bytes (default 0: Boost's default, fixedsize_stack of 128 KiB)"},
    {},
};
const bench_opt echo_server_opts[] = {
    {"listen", "ADDR", 0, 0, "where to listen, HOST:PORT (default 127.0.0.1:0: a free port, printed as PORT n)"},
    {},
};

const bench_opt http_server_opts[] = {
    {"listen", "ADDR", 0, 0, "where to listen, HOST:PORT (default 127.0.0.1:0: a free port, printed as PORT n)"},
    {},
};

const bench_workload workloads[] = {
    {"ring", ring_main, "a token passed around a ring of fibers", ring_opts},
    {"chan", chan_main, "two fibers ping-pong over a channel", chan_opts},
    {"fiber-spawn", fiber_spawn_main, "start and join N fibers, B at a time", spawn_opts},
    {"idle", idle_main, "memory per blocked fiber", idle_opts},
    {"echo-server", echo_server_main, "the echo server of treadle-bench echo, until stdin ends (not timed itself)",
     echo_server_opts},
    {"http-server", boost_fiber_http_server_main,
     "a keep-alive HTTP/1.1 server answering GET / with \"Hello, World!\", until stdin ends (not timed itself)",
     http_server_opts},
};

} // namespace

int main(int argc, char **argv)
{
  return bench_run("bench-boost-fiber", workloads, sizeof workloads / sizeof workloads[0], argc, argv);
}
