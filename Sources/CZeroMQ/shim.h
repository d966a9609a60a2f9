#ifndef CZEROMQ_SHIM_H
#define CZEROMQ_SHIM_H

#include <zmq.h>
#include <errno.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

/// errno as libzmq set it, read through a function so Swift sees the thread's value.
static inline int CZeroMQ_errno(void) { return zmq_errno(); }

/// A non-blocking eventfd for waking a poll loop, or -1.
static inline int CZeroMQ_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

/// Makes an eventfd readable.
static inline void CZeroMQ_signal(int fd) {
    uint64_t one = 1;
    (void)!write(fd, &one, sizeof one);
}

/// Consumes an eventfd's pending signals.
static inline void CZeroMQ_drain(int fd) {
    uint64_t value;
    (void)!read(fd, &value, sizeof value);
}

static inline void CZeroMQ_close(int fd) { close(fd); }

#endif
