// SPDX-License-Identifier: MIT
//
// bench-boost-fiber http-server: the Boost.Fiber peer of examples/httpd in
// the http group (docs/BENCHMARKS.md, "HTTP"; bench/drivers/http_driver.py
// starts it).  The contract of echo-server: listen (default 127.0.0.1:0),
// print "PORT n", serve until stdin reaches end of file, then print "SERVED
// conns=N requests=R" and exit 0.
//
// No HTTP library: Boost.Fiber over Boost.Asio on one thread, as
// echo-server (asio_fiber.hpp): an acceptor fiber, a fiber per connection
// reading requests into a 16 KiB buffer (async_read_some) and answering them
// (async_write), each call suspending the fiber until Asio completes it,
// TCP_NODELAY.  Every request head (up to its "\r\n\r\n") that a read
// completes is answered, so that pipelined requests arriving in one read are
// answered together, in one write, and a head split across reads waits in
// the buffer for its end.  The answer to GET / is the bytes examples/httpd
// sends (the same headers in the same order, a Date rebuilt when the second
// of time(2) changes, read once per read), kept open for HTTP/1.1 and closed,
// with "Connection: close", for HTTP/1.0 or a Connection header naming close;
// any other target is 404.  Anything else -- a method other than GET, a
// malformed request line or header, a body (Content-Length other than 0,
// Transfer-Encoding), a head that does not fit the buffer -- is answered 400
// and the connection closed, as httpd's own error replies are worded.  The
// same parser as bench-st's (../st/st_http.c).

#include "asio_fiber.hpp"

extern "C" {
#include "bench.h"
}

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>

#include <strings.h>
#include <unistd.h>

namespace {

namespace asio = boost::asio;
namespace fibers = boost::fibers;
using boost::system::error_code;

constexpr size_t IN_CAP = 16 * 1024;  // a connection's input; a request head must fit
constexpr size_t OUT_CAP = 16 * 1024; // the answers to one read, sent together

long accepted;
long long answered;

// ---- the answers ------------------------------------------------------------

const char hello_body[] = "Hello, World!";
time_t date_sec = -1;
char date[32];
char hello[256], hello_close[256];
size_t hello_len, hello_close_len;

// httpd's date_refresh (examples/httpd/server.c), byte for byte.
void date_refresh()
{
  time_t now = time(nullptr);
  if (now == date_sec)
    return;
  date_sec = now;
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
  hello_len = (size_t)snprintf(hello, sizeof hello,
                               "HTTP/1.1 200 OK\r\nServer: treadle\r\nDate: %s\r\n"
                               "Content-Type: text/plain\r\nContent-Length: %zu\r\n\r\n%s",
                               date, sizeof hello_body - 1, hello_body);
  hello_close_len = (size_t)snprintf(hello_close, sizeof hello_close,
                                     "HTTP/1.1 200 OK\r\nServer: treadle\r\nDate: %s\r\n"
                                     "Content-Type: text/plain\r\nContent-Length: %zu\r\n"
                                     "Connection: close\r\n\r\n%s",
                                     date, sizeof hello_body - 1, hello_body);
}

enum { HELLO = 200, NOT_FOUND = 404, BAD = 400 };

// An error answer as httpd's put_error words it; n bytes at out.
size_t error_answer(char *out, size_t room, int status, bool closes)
{
  const char *reason = status == NOT_FOUND ? "Not Found" : "Bad Request";
  char body[64];
  int nb = snprintf(body, sizeof body, "%d %s\n", status, reason);
  int n = snprintf(out, room,
                   "HTTP/1.1 %d %s\r\nServer: treadle\r\nDate: %s\r\nContent-Type: text/plain\r\n"
                   "Content-Length: %d\r\n%s\r\n%s",
                   status, reason, date, nb, closes ? "Connection: close\r\n" : "", body);
  return n < 0 || (size_t)n >= room ? 0 : (size_t)n;
}

// ---- the request ------------------------------------------------------------

bool is_tchar(unsigned char ch)
{
  return ch > ' ' && ch < 0x7f && !strchr("\"(),/:;<=>?@[\\]{}", ch);
}

// Whether the comma-separated list v[0..n) has the token tok (any case).
bool has_token(const char *v, size_t n, const char *tok)
{
  size_t tn = strlen(tok);
  const char *end = v + n;
  while (v < end) {
    while (v < end && (*v == ' ' || *v == '\t' || *v == ','))
      v++;
    const char *t = v;
    while (v < end && *v != ',')
      v++;
    const char *te = v;
    while (te > t && (te[-1] == ' ' || te[-1] == '\t'))
      te--;
    if ((size_t)(te - t) == tn && strncasecmp(t, tok, tn) == 0)
      return true;
  }
  return false;
}

const char *find(const char *p, size_t n, const char *what, size_t wn)
{
  return static_cast<const char *>(memmem(p, n, what, wn));
}

// The answer to the complete head h[0..len) (it ends in "\r\n\r\n"): HELLO,
// NOT_FOUND or BAD; *closes when the connection closes after it.
int parse_head(const char *h, size_t len, bool *closes)
{
  const char *end = h + len - 2; // the empty line that ends the head
  const char *eol = find(h, len, "\r\n", 2);
  // "GET " target " HTTP/1.x"
  if (eol - h < 14 || memcmp(h, "GET ", 4) != 0)
    return BAD;
  const char *target = h + 4;
  const char *sp = static_cast<const char *>(memchr(target, ' ', (size_t)(eol - target)));
  if (!sp || sp == target || eol - sp != 9 || memcmp(sp + 1, "HTTP/1.", 7) != 0 || (sp[8] != '0' && sp[8] != '1'))
    return BAD;
  for (const char *p = target; p < sp; p++)
    if ((unsigned char)*p <= ' ' || *p == 0x7f)
      return BAD;
  *closes = sp[8] == '0';
  bool root = sp - target == 1 && *target == '/';
  for (const char *line = eol + 2; line < end; line = eol + 2) {
    eol = find(line, (size_t)(end + 2 - line), "\r\n", 2);
    const char *colon = static_cast<const char *>(memchr(line, ':', (size_t)(eol - line)));
    if (!colon || colon == line)
      return BAD;
    for (const char *p = line; p < colon; p++)
      if (!is_tchar((unsigned char)*p))
        return BAD;
    const char *v = colon + 1, *ve = eol;
    for (const char *p = v; p < ve; p++)
      if (*p == '\r' || *p == '\n' || *p == '\0')
        return BAD;
    while (v < ve && (*v == ' ' || *v == '\t'))
      v++;
    while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
      ve--;
    size_t nlen = (size_t)(colon - line), vlen = (size_t)(ve - v);
    if (nlen == 10 && strncasecmp(line, "connection", 10) == 0) {
      if (has_token(v, vlen, "close"))
        *closes = true;
    } else if (nlen == 14 && strncasecmp(line, "content-length", 14) == 0) {
      if (vlen != 1 || *v != '0')
        return BAD; // no bodies
    } else if (nlen == 17 && strncasecmp(line, "transfer-encoding", 17) == 0) {
      return BAD;
    }
  }
  return root ? HELLO : NOT_FOUND;
}

// ---- the connection ---------------------------------------------------------

void serve(asio::ip::tcp::socket sock)
{
  std::unique_ptr<char[]> in_buf(new char[IN_CAP]), out_buf(new char[OUT_CAP]);
  char *in = in_buf.get(), *out = out_buf.get();
  size_t len = 0;     // bytes held in in[]
  size_t scanned = 0; // of them, searched for a head's end without finding one
  error_code ec;
  auto send = [&](size_t n) {
    asio::async_write(sock, asio::buffer(out, n), bf_asio::yield[ec]);
    return !ec;
  };
  bool open = true;
  while (open) {
    size_t n = sock.async_read_some(asio::buffer(in + len, IN_CAP - len), bf_asio::yield[ec]);
    if (ec) // the client closed
      break;
    len += n;
    date_refresh();
    size_t start = 0, out_len = 0;
    for (;;) {
      const char *e = find(in + scanned, len - scanned, "\r\n\r\n", 4);
      if (!e) {
        scanned = len - start > 3 ? len - 3 : start;
        if (start == 0 && len == IN_CAP) { // a head larger than the buffer
          out_len += error_answer(out + out_len, OUT_CAP - out_len, BAD, true);
          open = false;
        }
        break;
      }
      size_t end = (size_t)(e - in) + 4;
      bool closes = false;
      int what = parse_head(in + start, end - start, &closes);
      if (what == BAD)
        closes = true;
      size_t need = what == HELLO ? (closes ? hello_close_len : hello_len) : 256;
      if (out_len + need > OUT_CAP) {
        bool sent = send(out_len);
        out_len = 0;
        if (!sent) {
          open = false;
          break;
        }
      }
      if (what == HELLO) {
        memcpy(out + out_len, closes ? hello_close : hello, need);
        out_len += need;
      } else {
        out_len += error_answer(out + out_len, OUT_CAP - out_len, what, closes);
      }
      answered++;
      start = scanned = end;
      if (closes) {
        open = false;
        break;
      }
    }
    if (out_len > 0 && !send(out_len))
      break;
    memmove(in, in + start, len - start);
    len -= start;
    scanned -= start;
  }
}

} // namespace

// bench_boost_fiber.cpp's workload table names it.
int boost_fiber_http_server_main(int argc, char **argv)
{
  std::string listen_at = bench_opt_str(argc, argv, "listen", "127.0.0.1:0");
  size_t colon = listen_at.rfind(':');
  error_code ec;
  asio::ip::address addr = asio::ip::make_address(listen_at.substr(0, colon == std::string::npos ? 0 : colon), ec);
  char *end = nullptr;
  long port = colon == std::string::npos ? -1 : strtol(listen_at.c_str() + colon + 1, &end, 10);
  if (ec || port < 0 || port > 65535 || *end)
    bench_die("http-server: --listen wants HOST:PORT, not '%s'", listen_at.c_str());
  bench_raise_nofile();
  asio::io_context io(1);
  bf_asio::round_robin::install(io);
  asio::ip::tcp::acceptor acceptor(io, asio::ip::tcp::endpoint(addr, (unsigned short)port));
  printf("PORT %d\n", acceptor.local_endpoint().port());
  fflush(stdout);
  fprintf(stderr, "http-server: Boost %d.%d, Asio %d, listening on port %d\n", BOOST_VERSION / 100000,
          BOOST_VERSION / 100 % 1000, BOOST_ASIO_VERSION, acceptor.local_endpoint().port());

  fibers::fiber([&] { // serves until stdin ends: the driver's way to stop the server
    asio::posix::stream_descriptor in(io, ::dup(0));
    char b[256];
    error_code e;
    while (!e)
      in.async_read_some(asio::buffer(b), bf_asio::yield[e]);
    printf("SERVED conns=%ld requests=%lld\n", accepted, answered);
    fflush(stdout);
    _exit(0);
  }).detach();
  fibers::fiber([&] {
    for (;;) {
      asio::ip::tcp::socket sock(io);
      error_code e;
      acceptor.async_accept(sock, bf_asio::yield[e]);
      if (e) {
        fprintf(stderr, "http-server: accept: %s\n", e.message().c_str());
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
