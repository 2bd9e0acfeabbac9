// One TCP stream, as fast as it goes: the ceiling the socket transport is
// measured against (bench/multinode_allreduce.sh runs it between two network
// namespaces in the same run as the all-reduce figures).
//
//   tcp_stream server PORT            accepts one connection, reads until EOF
//   tcp_stream client ADDR PORT BYTES writes BYTES, prints GB/s (1e9 bytes/s)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

int die(const char* what) {
  std::perror(what);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr size_t kChunk = 4u << 20;
  std::vector<char> buf(kChunk, 1);
  if (argc == 3 && std::strcmp(argv[1], "server") == 0) {
    int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[2])));
    if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(l, 1) != 0) return die("listen");
    int s = accept(l, nullptr, nullptr);
    if (s < 0) return die("accept");
    size_t total = 0;
    ssize_t n;
    while ((n = recv(s, buf.data(), kChunk, 0)) > 0) total += static_cast<size_t>(n);
    std::printf("received %zu bytes\n", total);
    return 0;
  }
  if (argc == 5 && std::strcmp(argv[1], "client") == 0) {
    const size_t bytes = std::strtoull(argv[4], nullptr, 10);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(std::atoi(argv[3])));
    inet_pton(AF_INET, argv[2], &a.sin_addr);
    int s = -1;
    for (int i = 0; i < 100; ++i) {  // the server may still be starting
      s = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) break;
      close(s);
      s = -1;
      usleep(50000);
    }
    if (s < 0) return die("connect");
    const auto t0 = std::chrono::steady_clock::now();
    size_t sent = 0;
    while (sent < bytes) {
      ssize_t n = send(s, buf.data(), std::min(kChunk, bytes - sent), 0);
      if (n <= 0) return die("send");
      sent += static_cast<size_t>(n);
    }
    shutdown(s, SHUT_WR);
    char c;
    while (recv(s, &c, 1, 0) > 0) {
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("tcp_stream: %zu bytes in %.3f s: %.2f GB/s\n", sent, sec,
                static_cast<double>(sent) / sec / 1e9);
    return 0;
  }
  std::fprintf(stderr, "usage: %s server PORT | client ADDR PORT BYTES\n", argv[0]);
  return 2;
}
