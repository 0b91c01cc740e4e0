/* What the fake MPS control daemon (nvidia-cuda-mps-control.c) and the fake MPS server
 * (nvidia-cuda-mps-server.c) share: the driver version they carry, writing whole buffers,
 * reading one line with a deadline, the log line format and the peer's credentials.
 *
 * The wire protocol between the fakes and the fake libcuda (integration/fake-cuda/src/
 * mps.rs) is graft's own: NVIDIA's is private. Only what travels over it follows the MPS
 * documentation (who gets a server, which limits a client ends up with).
 */
#ifndef GRAFT_FAKE_MPS_COMMON_H
#define GRAFT_FAKE_MPS_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifndef DRIVER_VERSION
#define DRIVER_VERSION "580.95.05"
#endif

/* The MPS guide's defaults ("Appendix: Tools and Interface Reference", environment
 * variables CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY). */
#define DEFAULT_PIPE_DIR "/tmp/nvidia-mps"
#define DEFAULT_LOG_DIR "/var/log/nvidia-mps"
#define MAX_LINE 4096
/* The first line a fake libcuda sends on the control socket, and the server's socket name
 * (graft's protocol, see above). */
#define CLIENT_HELLO "graft-fake-mps-client"
#define SERVER_SOCKET_FMT "%s/mps-server-%ld"
/* Devices a pinned memory limit can name (CUDA device ordinals as the server sees them). */
#define MAX_DEVS 8

static int write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

static int write_str(int fd, const char *s) { return write_all(fd, s, strlen(s)); }

/* One line (without its end, trailing blanks trimmed) read from `fd` within `timeout_ms`,
 * one byte at a time so that nothing after the line is consumed. Returns its length, or
 * -1 on EOF, error or timeout before a line end (what was read stays in `line`). */
static int read_line(int fd, char *line, size_t len, int timeout_ms) {
    size_t n = 0;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    line[0] = '\0';
    while (n < len - 1) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long spent = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (timeout_ms >= 0 && spent >= timeout_ms) return -1;
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, timeout_ms < 0 ? -1 : (int)(timeout_ms - spent));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        char c;
        ssize_t got = read(fd, &c, 1);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        if (c == '\n') break;
        line[n++] = c;
        line[n] = '\0';
    }
    while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
        line[--n] = '\0';
    return (int)n;
}

/* `[<unix time>] <message>\n` to `fd` in one write, so that lines of several writers never
 * interleave. */
static void vlog_fd(int fd, const char *fmt, va_list ap) {
    if (fd < 0) return;
    char msg[MAX_LINE + 256];
    int n = snprintf(msg, sizeof msg, "[%lld] ", (long long)time(NULL));
    n += vsnprintf(msg + n, sizeof msg - (size_t)n - 1, fmt, ap);
    if (n > (int)sizeof msg - 2) n = (int)sizeof msg - 2;
    msg[n++] = '\n';
    write_all(fd, msg, (size_t)n);
}

/* The connected peer's uid, gid and pid, as the kernel tells (SO_PEERCRED). */
static int peer(int fd, struct ucred *cred) {
    socklen_t len = sizeof *cred;
    return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &len);
}

/* `value` made absolute against the working directory. */
static int absolute(const char *value, char *out, size_t len) {
    if (value[0] == '/') return snprintf(out, len, "%s", value) < (int)len ? 0 : -1;
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return -1;
    return snprintf(out, len, "%s/%s", cwd, value) < (int)len ? 0 : -1;
}

static int unix_addr(struct sockaddr_un *addr, const char *path) {
    memset(addr, 0, sizeof *addr);
    addr->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof addr->sun_path) return -1;
    memcpy(addr->sun_path, path, strlen(path) + 1);
    return 0;
}

/* A listening socket at `path` (a stale one removed first), or -1. */
static int listen_at(const char *path) {
    struct sockaddr_un addr;
    if (unix_addr(&addr, path) != 0) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if ((unlink(path) != 0 && errno != ENOENT) ||
        bind(fd, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(fd, 64) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* A pinned memory limit as the control commands take it: an integer followed by M or G
 * (the MPS guide: set_default_device_pinned_mem_limit), in MiB; -1 when malformed. */
static long long parse_mem(const char *s) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v < 0) return -1;
    if (strcmp(end, "M") == 0 || strcmp(end, "MB") == 0) return v;
    if (strcmp(end, "G") == 0 || strcmp(end, "GB") == 0) return v * 1024;
    return -1;
}

#endif
