/* What the fake IMEX daemon (nvidia-imex.c) and its control program (nvidia-imex-ctl.c)
 * share: reading the IMEX config file and the node list the way NVIDIA documents them, the
 * node's fabric clique from the fake NVML's fabric file, and writing whole buffers.
 *
 * Facts this follows (NVIDIA IMEX Service for NVLink Networks User's Guide, "IMEX Service
 * Config Options", docs.nvidia.com/multi-node-nvlink-systems/imex-guide/config.html, and
 * the commented default config.cfg NVIDIA ships, as copied into public provisioning
 * scripts):
 * - config.cfg is `KEY=VALUE` lines with `#` comments, read once at startup; the daemon
 *   is started as `nvidia-imex -c <config>` (default /etc/nvidia-imex/config.cfg);
 * - SERVER_PORT: TCP port of the peer service, 0..65535, default 50000;
 * - IMEX_NODE_CONFIG_FILE: the node list, default /etc/nvidia-imex/nodes_config.cfg, one
 *   IP address a line (the guide's and cloud vendors' examples);
 * - BIND_INTERFACE_IP: the address to listen on; empty means the address of the node
 *   list that one of this host's interfaces has;
 * - IMEX_CMD_ENABLED (0/1), IMEX_CMD_PORT (default 50005), IMEX_CMD_BIND_INTERFACE_IP
 *   (empty: every interface): the command service that nvidia-imex-ctl queries;
 * - DAEMONIZE (default 1), LOG_FILE_NAME (default /var/log/nvidia-imex.log; stderr when
 *   it cannot be opened or is empty).
 * The stand-in refuses keys the default config does not have and values out of range,
 * where the real daemon's exact strictness is not documented: failing loudly is the safer
 * fake. Host names in the node list (newer IMEX releases accept them) are refused: the
 * static stand-in has no resolver.
 *
 * The fabric: the real daemon needs the node's GPUs registered in an NVLink fabric clique
 * (NVML fabric info: state completed, cluster UUID, clique id; the clique a ComputeDomain
 * daemon joins is `<cluster UUID>.<clique id>`). The fake NVML takes them from the file
 * `fake-nvml-fabric` beside libnvidia-ml (integration/fake-nvml/src/fabric.rs); the
 * stand-ins read it at `<dir of the executable>/../lib/x86_64-linux-gnu/`, which is
 * /usr/lib/x86_64-linux-gnu of the driver root they are installed in.
 */
#ifndef GRAFT_FAKE_IMEX_COMMON_H
#define GRAFT_FAKE_IMEX_COMMON_H

#define _GNU_SOURCE
#include <ctype.h>
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DRIVER_VERSION
#define DRIVER_VERSION "580.95.05"
#endif
#define DEFAULT_CONFIG "/etc/nvidia-imex/config.cfg"
#define MAX_NODES 64
#define MAX_LINE 1024

struct imex_config {
    char path[PATH_MAX];
    int server_port;
    char node_file[PATH_MAX];
    char bind_ip[64];
    int cmd_enabled;
    int cmd_port;
    char cmd_bind_ip[64];
    int daemonize;
    char log_file[PATH_MAX];
};

/* Keys of NVIDIA's default config.cfg; any other key is refused. */
static const char *const KNOWN_KEYS[] = {
    "LOG_LEVEL", "LOG_FILE_NAME", "STATS_FILE_NAME", "LOG_APPEND_TO_LOG", "LOG_FILE_MAX_SIZE",
    "LOG_MAX_ROTATE_COUNT", "LOG_USE_SYSLOG", "DAEMONIZE", "BIND_INTERFACE_IP", "SERVER_PORT",
    "IMEX_NODE_CONFIG_FILE", "NETWORK_INTERFACE", "IMEX_WAIT_FOR_QUORUM",
    "IMEX_ENABLE_AUTH_ENCRYPTION", "IMEX_AUTH_ENCRYPTION_MODE", "IMEX_AUTH_SOURCE",
    "IMEX_SERVER_KEY", "IMEX_SERVER_CERT", "IMEX_SERVER_CERT_AUTH", "IMEX_CLIENT_KEY",
    "IMEX_CLIENT_CERT", "IMEX_CLIENT_CERT_AUTH", "IMEX_SECURITY_TARGET_OVERRIDE",
    "IMEX_GSS_SERVICE_NAME", "IMEX_GSS_TIMEOUT_SEC", "IMEX_GSS_RETRY_INTERVAL_SEC",
    "IMEX_GSS_SEC_CONTEXT_LIFETIME_SEC", "IMEX_GSS_SHUTDOWN_ON_FAILURE", "IMEX_CMD_ENABLED",
    "IMEX_CMD_BIND_INTERFACE_IP", "IMEX_CMD_PORT", "IMEX_CMD_UNIX_DOMAIN_PATH",
    "IMEX_NODE_DISCONNECTED_GRACE_TIME", "IMEX_CONN_WAIT_TIMEOUT", NULL,
};

__attribute__((unused)) static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = 0;
    return s;
}

/* A port number in 0..65535, or -1. */
__attribute__((unused)) static int parse_port(const char *v) {
    char *end;
    errno = 0;
    long p = strtol(v, &end, 10);
    if (!*v || *end || errno || p < 0 || p > 65535) return -1;
    return (int)p;
}

__attribute__((unused)) static int valid_ip(const char *s) {
    unsigned char buf[16];
    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

/* A host name as a node list may give one instead of an address (RFC 1123 labels). */
__attribute__((unused)) static int valid_name(const char *s) {
    size_t n = strlen(s);
    if (!n || n > 63 || !isalnum((unsigned char)s[0])) return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '.') return 0;
    return 1;
}

/* Reads `path` into `c`; on a malformed file writes why to `err` and returns -1. */
__attribute__((unused)) static int read_config(const char *path, struct imex_config *c,
                                               char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    snprintf(c->path, sizeof c->path, "%s", path);
    c->server_port = 50000;
    snprintf(c->node_file, sizeof c->node_file, "/etc/nvidia-imex/nodes_config.cfg");
    c->cmd_port = 50005;
    c->daemonize = 1;
    snprintf(c->log_file, sizeof c->log_file, "/var/log/nvidia-imex.log");
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "Failed to open config file %s: %s", path, strerror(errno));
        return -1;
    }
    char line[MAX_LINE];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        n++;
        char *l = trim(line);
        if (!*l || *l == '#') continue;
        char *eq = strchr(l, '=');
        if (!eq) {
            snprintf(err, errlen, "Failed to parse config file %s line %d: no '=' in \"%s\"",
                     path, n, l);
            fclose(f);
            return -1;
        }
        *eq = 0;
        char *k = trim(l), *v = trim(eq + 1);
        int known = 0;
        for (const char *const *p = KNOWN_KEYS; *p; p++) known |= !strcmp(*p, k);
        const char *bad = NULL;
        int *port = !strcmp(k, "SERVER_PORT")     ? &c->server_port
                    : !strcmp(k, "IMEX_CMD_PORT") ? &c->cmd_port
                                                  : NULL;
        int is_bind = !strcmp(k, "BIND_INTERFACE_IP");
        if (!known) bad = "unknown key";
        else if (port) bad = (*port = parse_port(v)) < 0 ? "not a port (0..65535)" : NULL;
        else if (!strcmp(k, "IMEX_CMD_ENABLED") || !strcmp(k, "DAEMONIZE")) {
            if (strcmp(v, "0") && strcmp(v, "1")) bad = "not 0 or 1";
            else *(!strcmp(k, "DAEMONIZE") ? &c->daemonize : &c->cmd_enabled) = atoi(v);
        } else if (is_bind || !strcmp(k, "IMEX_CMD_BIND_INTERFACE_IP")) {
            if (*v && !valid_ip(v)) bad = "not an IP address";
            else snprintf(is_bind ? c->bind_ip : c->cmd_bind_ip, 64, "%s", v);
        } else if (!strcmp(k, "IMEX_NODE_CONFIG_FILE")) {
            if (!*v) bad = "empty";
            else snprintf(c->node_file, sizeof c->node_file, "%s", v);
        } else if (!strcmp(k, "LOG_FILE_NAME")) {
            snprintf(c->log_file, sizeof c->log_file, "%s", v);
        }
        if (bad) {
            snprintf(err, errlen, "Failed to parse config file %s line %d: %s=%s: %s", path, n,
                     k, v, bad);
            fclose(f);
            return -1;
        }
    }
    fclose(f);
    return 0;
}

/* Reads the node list: one IP address a line (blank lines skipped). Returns how many, or
 * -1 with why in `err`. */
__attribute__((unused)) static int read_nodes(const char *path, char nodes[][64], char *err,
                                              size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "Failed to read node configuration file %.512s: %s", path,
                 strerror(errno));
        return -1;
    }
    char line[MAX_LINE];
    int n = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *l = trim(line);
        if (!*l) continue;
        if ((!valid_ip(l) && !valid_name(l)) || n == MAX_NODES) {
            snprintf(err, errlen, "Failed to read node configuration file %.512s line %d: %s",
                     path, lineno,
                     n == MAX_NODES ? "too many nodes" : "not an IP address or host name");
            fclose(f);
            return -1;
        }
        for (int i = 0; i < n; i++)
            if (!strcmp(nodes[i], l)) {
                snprintf(err, errlen, "Failed to read node configuration file %.512s: %.64s twice",
                         path, l);
                fclose(f);
                return -1;
            }
        snprintf(nodes[n++], 64, "%s", l);
    }
    fclose(f);
    if (!n) snprintf(err, errlen, "Node configuration file %.512s lists no node", path);
    return n ? n : -1;
}

/* The directory of the driver's libraries, beside the running executable's (see above). */
__attribute__((unused)) static void driver_lib_dir(char *out, size_t len) {
    char exe[PATH_MAX - 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n < 0 ? 0 : n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(out, len, "%s/../lib/x86_64-linux-gnu", exe);
}

/* The real daemon aborts unless the loaded driver stack is of a compatible version (IMEX
 * guide, "Getting Started"); the stand-in needs its driver's NVML,
 * libnvidia-ml.so.<DRIVER_VERSION>, beside it. */
__attribute__((unused)) static int check_driver(char *err, size_t errlen) {
    char path[PATH_MAX + 64];
    driver_lib_dir(path, PATH_MAX);
    size_t n = strlen(path);
    snprintf(path + n, sizeof path - n, "/libnvidia-ml.so.%s", DRIVER_VERSION);
    if (access(path, R_OK) == 0) return 0;
    snprintf(err, errlen, "NVIDIA driver %s not found (%.512s: %s): IMEX needs a loaded, "
             "compatible driver", DRIVER_VERSION, path, strerror(errno));
    return -1;
}

/* The node's clique as `<cluster UUID, dashed>.<clique id>` into `out`, from the fake NVML's
 * fabric file (format in integration/fake-nvml/src/fabric.rs: `<32 hex>:<clique>` and an
 * optional `:<state>`, `completed` when absent). Returns -1 with why in `err` when the GPUs
 * are in no fabric or their registration is not complete. */
__attribute__((unused)) static int read_clique(char *out, size_t outlen, char *err,
                                               size_t errlen) {
    char path[PATH_MAX + 64];
    driver_lib_dir(path, PATH_MAX);
    strcat(path, "/fake-nvml-fabric");
    FILE *f = fopen(path, "r");
    char line[MAX_LINE] = "";
    if (!f || !fgets(line, sizeof line, f)) {
        if (f) fclose(f);
        snprintf(err, errlen, "GPUs are not registered in an NVLink fabric (fabric info not "
                              "supported): IMEX needs a fabric clique");
        return -1;
    }
    fclose(f);
    char *l = trim(line), *colon = strchr(l, ':');
    if (!colon || colon - l != 32 || strspn(l, "0123456789abcdefABCDEF") != 32) {
        snprintf(err, errlen, "GPU fabric info is malformed: \"%s\"", l);
        return -1;
    }
    *colon = 0;
    char *clique = colon + 1, *state = strchr(clique, ':');
    if (state) *state++ = 0;
    if (!*clique || strspn(clique, "0123456789") != strlen(clique)) {
        snprintf(err, errlen, "GPU fabric info has no clique id: \"%s\"", clique);
        return -1;
    }
    if (state && strcmp(state, "completed")) {
        snprintf(err, errlen, "GPU fabric registration is %s, not completed", state);
        return -1;
    }
    /* As graft's driver and NVIDIA's write a clique: the dashed UUID, a dot, the id. */
    snprintf(out, outlen, "%.8s-%.4s-%.4s-%.4s-%.12s.%s", l, l + 8, l + 12, l + 16, l + 20,
             clique);
    for (char *c = out; *c; c++)
        if (*c >= 'A' && *c <= 'F') *c = (char)(*c - 'A' + 'a');
    return 0;
}

__attribute__((unused)) static int write_all(int fd, const char *buf, size_t len) {
    while (len) {
        ssize_t w = write(fd, buf, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

#endif
