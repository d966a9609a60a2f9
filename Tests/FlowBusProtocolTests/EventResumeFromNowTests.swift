import FlowBusWire
import Testing

@testable import FlowBusProtocol

@Suite("EventResume from the first heartbeat (a trace, a recording, a page)")
struct EventResumeFromNowTests {
    @Test("the first heartbeat is the position: no replay, what came before it is dropped, later events delivered")
    func startsAtTheFirstHeartbeat() {
        var resume = EventResume(since: nil)
        #expect(resume.live(kind: .didNavigate, source: "flowd#1", sequence: 11) == .hold, "before a heartbeat")
        #expect(resume.live(kind: .didNavigate, source: "flowd#1", sequence: 13) == .hold)
        #expect(resume.heartbeat(source: "flowd#1", sequence: 12) == nil, "nothing before it is asked for")
        #expect(resume.phase == .live)
        #expect(resume.position == 12)
        #expect(resume.judgeHeld(kind: .didNavigate, source: "flowd#1", sequence: 11) == .drop)
        #expect(resume.judgeHeld(kind: .didNavigate, source: "flowd#1", sequence: 13) == .deliver)
        #expect(resume.replays == 0)
        // From then on it resumes as any subscriber: another instance is asked from the position.
        #expect(resume.live(kind: .didNavigate, source: "flowd#2", sequence: 20) == .holdAndRequest(since: 13))
    }
}
