import Testing

@testable import ConciergeServer

/// The count behind returning freed memory after a burst of connections closes.
@Suite("Open connections")
struct OpenConnectionsTests {
    @Test("the drop is measured from the peak since the last look, which then starts again from the connections open")
    func dropFromPeak() {
        let connections = OpenConnections()
        for _ in 0..<600 { connections.opened() }
        for _ in 0..<550 { connections.closed() }
        #expect(connections.open == 50)
        #expect(connections.takeDrop() == 550)
        #expect(connections.takeDrop() == 0, "the same closed connections count once")
        for _ in 0..<10 { connections.opened() }
        for _ in 0..<30 { connections.closed() }
        #expect(connections.takeDrop() == 30)
        #expect(connections.open == 30)
    }
}
