/* The fake IMEX daemon's command service (part of nvidia-imex.c, included there after its
 * state): one request line, `q` (the daemon's state, as `nvidia-imex-ctl -q` prints it) or
 * `N` (the node table of `nvidia-imex-ctl -N`), one answer, then the connection closes.
 *
 * The table follows the real tool's layout in spirit (public captures of
 * `nvidia-imex-ctl -N`): a legend of the connectivity letters, `Nodes:` with one
 * `Node #<i> - <address> - <state>` line each, the `Nodes From\To` matrix, and
 * `Domain State: UP` (every node READY), `DEGRADED` or `DOWN` (no peer connected). A node
 * this daemon is not connected to is UNAVAILABLE and its row all I: nothing is known of it.
 */
#ifndef GRAFT_FAKE_IMEX_CMD_H
#define GRAFT_FAKE_IMEX_CMD_H

#include <sys/time.h>

/* Node i's state and its row of letters, as this daemon knows them. */
static const char *node_view(int i, char *letters) {
    static char word[40];
    if (i == self) {
        own_row(letters);
        return state();
    }
    const char *sp = strchr(peers[i].row, ' ');
    if (peers[i].status != 'C' || !sp || strlen(sp + 1) != (size_t)n_nodes) {
        memset(letters, 'I', (size_t)n_nodes);
        letters[n_nodes] = 0;
        return "UNAVAILABLE";
    }
    snprintf(word, sizeof word, "%.*s", (int)(sp - peers[i].row), peers[i].row);
    snprintf(letters, (size_t)n_nodes + 1, "%s", sp + 1);
    return word;
}

static void node_table(char *out, size_t len) {
    char letters[MAX_NODES + 1];
    size_t o = 0;
    int ready = 0, connected = 0;
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
#define PUT(...) o += (size_t)snprintf(out + o, o < len ? len - o : 0, __VA_ARGS__)
    PUT("Connectivity Table Legend:\n"
        "I - Invalid - no connection status (unreachable, or refused the handshake)\n"
        "N - Never Connected\n"
        "R - Recovering - lost the connection, clean-up not yet triggered\n"
        "C - Connected - ready for operation\n\n");
    PUT("%d/%d/%d %02d:%02d:%02d\nNodes:\n", tm.tm_mon + 1, tm.tm_mday, tm.tm_year + 1900,
        tm.tm_hour, tm.tm_min, tm.tm_sec);
    for (int i = 0; i < n_nodes; i++) {
        const char *st = node_view(i, letters);
        ready += !strcmp(st, "READY");
        connected += i != self && peers[i].status == 'C';
        PUT("Node #%-3d - %-15s - %s\n", i, nodes[i], st);
    }
    PUT("\n Nodes From\\To ");
    for (int j = 0; j < n_nodes; j++) PUT(" %-3d", j);
    PUT("\n");
    for (int i = 0; i < n_nodes; i++) {
        node_view(i, letters);
        PUT("    %4d       ", i);
        for (int j = 0; j < n_nodes; j++) PUT(" %c  ", letters[j]);
        PUT("\n");
    }
    PUT("Domain State: %s\n", ready == n_nodes ? "UP"
                              : n_nodes > 1 && !connected ? "DOWN"
                                                          : "DEGRADED");
#undef PUT
}

static void serve_command(int cfd) {
    int fd = accept4(cfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return;
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char req[64] = "", out[16384];
    size_t got = 0;
    while (got < sizeof req - 1 && !strchr(req, '\n')) {
        ssize_t r = read(fd, req + got, sizeof req - 1 - got);
        if (r <= 0) break;
        got += (size_t)r;
        req[got] = 0;
    }
    char *l = trim(req);
    if (!strcmp(l, "q")) snprintf(out, sizeof out, "%s\n", state());
    else if (!strcmp(l, "N")) node_table(out, sizeof out);
    else snprintf(out, sizeof out, "unknown command \"%s\"\n", l);
    write_all(fd, out, strlen(out));
    close(fd);
}

#endif
