// SPDX-License-Identifier: MIT
//
// Boost.Fiber over Boost.Asio, as Boost.Fiber's documentation integrates
// the two ("Sharing a Thread with Another Main Loop" and "Then There's
// Boost.Asio"; the code of boost/libs/fiber/examples/asio/): a scheduling
// algorithm that shares the thread with an io_context, and a completion
// token, `yield`, that suspends the calling fiber until an asynchronous
// operation completes:
//
//     bf_asio::round_robin::install(io);     // this thread's fibers
//     ... fibers: n = sock.async_read_some(asio::buffer(buf), bf_asio::yield[ec]);
//     bf_asio::round_robin::run();            // in main: fibers and I/O, until io.stop()
//
// round_robin is the examples' boost::fibers::asio::round_robin written for
// io_context: a round-robin ready queue, and a main loop that runs every
// ready handler (io.poll()) and then lets the ready fibers run while fibers
// are ready, and otherwise blocks in the io_context (io.run_one()) until a
// handler makes one ready.  The examples post that loop to the io_context
// and call io.run(); here main calls it directly, because Asio 1.18 queues
// a completion posted from inside a handler (which every fiber would be,
// the loop being one) on that run()'s private queue, where a nested
// run_one() does not look, and the server would stall.  The scheduler
// keeps the io_context busy, as the examples' service does: run() returns
// once io.stop() is called.  yield is the examples' yield_t written for
// Asio 1.18's async_result<Token, Signature>::initiate (the examples'
// handler_type specialisations are gone from Asio): the handler stores the
// operation's result and hands the fiber back to the scheduler
// (context::schedule), the fiber having suspended itself
// (context::suspend) after starting the operation.  One thread: no
// locking beyond what the types carry.
#ifndef TDL_BENCH_ASIO_FIBER_HPP
#define TDL_BENCH_ASIO_FIBER_HPP

#include <boost/asio.hpp>
#include <boost/fiber/all.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <mutex>
#include <optional>
#include <utility>

namespace bf_asio {

namespace asio = boost::asio;
namespace fibers = boost::fibers;

class round_robin : public fibers::algo::algorithm {
public:
  using clock = std::chrono::steady_clock;

  explicit round_robin(asio::io_context &io) : io_(io), suspend_timer_(io), work_(asio::make_work_guard(io))
  {
    self_ = this;
  }

  // Makes round_robin this thread's scheduler, on io.
  static void install(asio::io_context &io) { fibers::use_scheduling_algorithm<round_robin>(io); }

  // The main loop, run by main (not from a handler): fibers and I/O until
  // io.stop().
  static void run()
  {
    round_robin *rr = self_;
    while (!rr->io_.stopped()) {
      if (rr->has_ready_fibers()) {
        while (rr->io_.poll()) // every handler that is ready: they make fibers ready
          ;
        // Let the ready fibers run: suspend_until() wakes main again.
        std::unique_lock<fibers::mutex> lk(rr->mtx_);
        rr->cnd_.wait(lk);
      } else if (!rr->io_.run_one()) { // nothing ready: block for one handler
        break;
      }
    }
  }

  void awakened(fibers::context *ctx) noexcept override
  {
    ctx->ready_link(rqueue_);
    if (!ctx->is_context(fibers::type::dispatcher_context))
      ++counter_;
  }

  fibers::context *pick_next() noexcept override
  {
    if (rqueue_.empty())
      return nullptr;
    fibers::context *ctx = &rqueue_.front();
    rqueue_.pop_front();
    if (!ctx->is_context(fibers::type::dispatcher_context))
      --counter_;
    return ctx;
  }

  bool has_ready_fibers() const noexcept override { return counter_ > 0; }

  void suspend_until(clock::time_point const &abs_time) noexcept override
  {
    // A fiber sleeps until abs_time: a timer makes run_one() return then.
    if (abs_time != (clock::time_point::max)()) {
      suspend_timer_.expires_at(abs_time);
      suspend_timer_.async_wait([](boost::system::error_code const &) { boost::this_fiber::yield(); });
    }
    cnd_.notify_one(); // the main loop runs again
  }

  void notify() noexcept override
  {
    // Another thread made a fiber of this one ready: end run_one() now.
    suspend_timer_.expires_at(clock::now());
    suspend_timer_.async_wait([](boost::system::error_code const &) { boost::this_fiber::yield(); });
  }

private:
  asio::io_context &io_;
  asio::steady_timer suspend_timer_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  fibers::scheduler::ready_queue_type rqueue_{};
  fibers::mutex mtx_{};
  fibers::condition_variable cnd_{};
  std::size_t counter_{0};
  static inline thread_local round_robin *self_ = nullptr;
};

// The completion token: yield throws boost::system::system_error on an
// error, yield[ec] stores it in ec.
struct yield_t {
  boost::system::error_code *ec = nullptr;
  yield_t operator[](boost::system::error_code &e) const { return yield_t{&e}; }
};
inline constexpr yield_t yield{};

namespace detail {
template <typename T> struct state {
  fibers::context *ctx;
  boost::system::error_code ec{};
  T value{};
  bool done = false;
};
struct none {};

template <typename T> struct handler {
  state<T> *st;
  void operator()(boost::system::error_code ec, T v)
  {
    st->ec = ec;
    st->value = std::move(v);
    wake();
  }
  void wake()
  {
    st->done = true;
    fibers::context::active()->schedule(st->ctx); // ready again: it runs after this handler
  }
};
template <> struct handler<none> {
  state<none> *st;
  void operator()(boost::system::error_code ec)
  {
    st->ec = ec;
    st->done = true;
    fibers::context::active()->schedule(st->ctx);
  }
};

template <typename T, typename Initiation, typename... Args>
T await(Initiation &&init, yield_t y, Args &&...args)
{
  state<T> st{fibers::context::active()};
  std::move(init)(handler<T>{&st}, std::forward<Args>(args)...);
  if (!st.done) // Asio never completes inside the initiation: the fiber waits
    st.ctx->suspend();
  if (y.ec)
    *y.ec = st.ec;
  else if (st.ec)
    throw boost::system::system_error(st.ec);
  return std::move(st.value);
}
} // namespace detail
} // namespace bf_asio

namespace boost::asio {
template <typename R, typename T> class async_result<bf_asio::yield_t, R(boost::system::error_code, T)> {
public:
  using return_type = std::decay_t<T>;
  template <typename Initiation, typename... Args>
  static return_type initiate(Initiation &&init, bf_asio::yield_t y, Args &&...args)
  {
    return bf_asio::detail::await<return_type>(std::forward<Initiation>(init), y, std::forward<Args>(args)...);
  }
};
template <typename R> class async_result<bf_asio::yield_t, R(boost::system::error_code)> {
public:
  using return_type = void;
  template <typename Initiation, typename... Args>
  static void initiate(Initiation &&init, bf_asio::yield_t y, Args &&...args)
  {
    bf_asio::detail::await<bf_asio::detail::none>(std::forward<Initiation>(init), y, std::forward<Args>(args)...);
  }
};
} // namespace boost::asio

#endif
