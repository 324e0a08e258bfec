/// Request path, envelope step: reads the business code in a JSON reply and says what it means.
public struct EnvelopeReader: Sendable {
    public enum Outcome: Sendable, Equatable {
        /// A success code: cacheable logical success.
        case success(code: Int)
        /// A refresh code: refresh the token and replay.
        case refresh(code: Int)
        /// A logout code: drop the session.
        case logout(code: Int)
        /// Any other code, or JSON without a code: a logical failure, passed on, not cached.
        case failure(code: Int?)
        /// Empty or non-JSON body on a JSON endpoint: the `unavailable` reply.
        case notJSON
    }

    public let envelope: ConciergeConfig.Envelope

    public init(envelope: ConciergeConfig.Envelope) {
        self.envelope = envelope
    }

    /// Classifies a parsed body (`nil` when the body was not JSON).
    public func classify(_ body: JSONValue?) -> Outcome {
        guard let body else { return .notJSON }
        guard let code = body[path: envelope.codePath]?.intValue else { return .failure(code: nil) }
        if envelope.successCodes.contains(code) { return .success(code: code) }
        if envelope.refreshCodes.contains(code) { return .refresh(code: code) }
        if envelope.logoutCodes.contains(code) { return .logout(code: code) }
        return .failure(code: code)
    }

    public func message(_ body: JSONValue?) -> String? {
        body?[path: envelope.messagePath]?.stringValue
    }
}
