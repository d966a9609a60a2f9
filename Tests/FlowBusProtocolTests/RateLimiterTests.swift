import FlowBusWire
import Testing

@testable import FlowBusProtocol

@Suite("Rate limiter: a token bucket per control peer")
struct RateLimiterTests {
    private let start = ContinuousClock.now
    private let flooder = Array("flood".utf8)
    private let polite = Array("polite".utf8)

    @Test("a burst is allowed at once, then the rate; one refusal per interval, the rest dropped")
    func burstThenRate() {
        var limiter = RateLimiter(rate: 10, burst: 5)
        for _ in 0..<5 { #expect(limiter.admit(flooder, now: start) == .allow) }
        guard case .refuse(let retryAfter) = limiter.admit(flooder, now: start) else {
            Issue.record("over the burst: refused")
            return
        }
        #expect(retryAfter == .milliseconds(100), "a token comes back after 1/rate")
        for _ in 0..<100 { #expect(limiter.admit(flooder, now: start) == .drop, "refused once per interval") }
        #expect(limiter.admit(flooder, now: start + .milliseconds(100)) == .allow, "a token came back")
        #expect(limiter.admit(flooder, now: start + .milliseconds(150)) == .drop, "refused less than an interval ago")
        let later = start + .milliseconds(1100)
        for _ in 0..<5 {
            #expect(limiter.admit(flooder, now: later) == .allow, "the bucket refilled to its burst, not beyond")
        }
        if case .refuse = limiter.admit(flooder, now: later) {
        } else {
            Issue.record("refused again, an interval after the last refusal")
        }
        #expect(limiter.counters == .init(allowed: 11, refused: 2, dropped: 101, evicted: 0))
    }

    @Test("peers are limited apart: a flood from one leaves another's requests allowed")
    func peersAreIndependent() {
        var limiter = RateLimiter(rate: 100, burst: 200)
        var allowedFlood = 0
        for index in 0..<20_000 {
            let now = start + .microseconds(index * 15)  // 20,000 requests in 0.3 s
            if limiter.admit(flooder, now: now) == .allow { allowedFlood += 1 }
            if index % 1000 == 0 { #expect(limiter.admit(polite, now: now) == .allow) }
        }
        #expect(allowedFlood <= 200 + 31, "burst plus 0.3 s of rate: \(allowedFlood)")
        let report = limiter.takeReport()
        #expect(report?.peers == 1 && report?.busiest.peer == flooder)
        #expect(report.map { $0.refused + $0.dropped } == 20_000 - allowedFlood)
        #expect(limiter.takeReport() == nil, "one report per interval")
    }

    @Test("buckets held are bounded: full ones go first, then the least recently used")
    func boundedPeers() {
        var limiter = RateLimiter(rate: 1, burst: 2, maxPeers: 3)
        for index in 0..<3 { _ = limiter.admit([UInt8(index)], now: start) }
        // Refilled after 2 s: forgetting them loses nothing.
        _ = limiter.admit([9], now: start + .seconds(2))
        #expect(limiter.peerCount == 1 && limiter.counters.evicted == 0)
        for index in 0..<3 { _ = limiter.admit([UInt8(index)], now: start + .seconds(2)) }
        #expect(limiter.peerCount == 3 && limiter.counters.evicted == 1, "none full: the least recently used goes")
        _ = limiter.admit([UInt8(7)], now: start + .seconds(2))
        #expect(limiter.peerCount == 3 && limiter.counters.evicted == 2)
    }
}
