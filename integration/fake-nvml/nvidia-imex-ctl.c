/* A stand-in for NVIDIA's `nvidia-imex-ctl`, the IMEX daemon's query tool, for GPU-less
 * tests; it talks to the stand-in daemon's command service (nvidia-imex.c, imex-cmd.h).
 *
 * What it does, as the real one (sources: the command service keys of NVIDIA's default
 * config.cfg, see imex-common.h; NVIDIA's ComputeDomain daemon, which runs
 * `nvidia-imex-ctl -q` and takes the domain as ready only when stdout is exactly
 * "READY\n", giving `-q -i 127.0.0.1 50005` before release 580 and `-q` alone, which reads
 * the config, since; an operator's guide, where `Query Status returned error code: 14`
 * means that no daemon answers):
 * - `-q`: prints the local daemon's state (READY, SHUTTING_DOWN) and exits 0;
 * - `-N`: prints the node table and the domain state, exits 0;
 * - finds the command service in the config (default /etc/nvidia-imex/config.cfg; `-c
 *   <file>` as the daemon takes it, which the tests need and the real ctl may not have):
 *   IMEX_CMD_ENABLED must be 1, IMEX_CMD_PORT and
 *   IMEX_CMD_BIND_INTERFACE_IP (empty: the local host) say where; `-i <ip> <port>` names
 *   the service directly, as releases before 580 needed;
 * - no daemon answering: the error on stderr, exit 1 (the exact status of the real tool is
 *   not documented; any non-zero one fails NVIDIA's check the same way); a bad command
 *   line or config: the reason on stderr, exit 1.
 */
#include "imex-common.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

static int usage(void) {
    fprintf(stderr, "usage: nvidia-imex-ctl {-q | -N} [-c <config file>] [-i <ip> <port>]\n");
    return 1;
}

int main(int argc, char **argv) {
    const char *config = DEFAULT_CONFIG, *ip = NULL, *req = NULL;
    int port = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v") || !strcmp(argv[i], "--version")) {
            printf("nvidia-imex-ctl (graft's stand-in) version %s\n", DRIVER_VERSION);
            return 0;
        }
        if (!strcmp(argv[i], "-q") || !strcmp(argv[i], "--query")) req = "q\n";
        else if (!strcmp(argv[i], "-N")) req = "N\n";
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) config = argv[++i];
        else if (!strcmp(argv[i], "-i") && i + 2 < argc) {
            ip = argv[++i];
            if ((port = parse_port(argv[++i])) < 0 || !valid_ip(ip)) return usage();
        } else return usage();
    }
    if (!req) return usage();
    char err[2 * MAX_LINE];
    if (!ip) {
        static struct imex_config cfg;
        if (read_config(config, &cfg, err, sizeof err) < 0) {
            fprintf(stderr, "nvidia-imex-ctl: %s\n", err);
            return 1;
        }
        if (!cfg.cmd_enabled) {
            fprintf(stderr, "nvidia-imex-ctl: the command service is not enabled "
                            "(IMEX_CMD_ENABLED=1 in %s)\n", config);
            return 1;
        }
        static char bind[64];
        snprintf(bind, sizeof bind, "%s", *cfg.cmd_bind_ip ? cfg.cmd_bind_ip : "127.0.0.1");
        ip = bind;
        port = cfg.cmd_port;
    }
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, ip, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        len = sizeof *a4;
    } else {
        inet_pton(AF_INET6, ip, &a6->sin6_addr);
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        len = sizeof *a6;
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (fd < 0 || connect(fd, (struct sockaddr *)&ss, len) < 0 ||
        write_all(fd, req, strlen(req)) < 0) {
        fprintf(stderr, "Query Status returned error code: 14 (no IMEX daemon answers at "
                        "%s:%d: %s)\n", ip, port, strerror(errno));
        return 1;
    }
    shutdown(fd, SHUT_WR);
    char buf[4096];
    ssize_t r;
    size_t total = 0;
    while ((r = read(fd, buf, sizeof buf)) > 0) {
        fwrite(buf, 1, (size_t)r, stdout);
        total += (size_t)r;
    }
    if (r < 0 || !total) {
        fprintf(stderr, "Query Status returned error code: 14 (the IMEX daemon at %s:%d did "
                        "not answer)\n", ip, port);
        return 1;
    }
    return 0;
}
