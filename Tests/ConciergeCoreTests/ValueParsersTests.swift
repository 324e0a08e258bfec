@testable import ConciergeCore
import Testing

@Suite("ValueParsers")
struct ValueParsersTests {
    // MARK: Durations

    @Test("durations with units: 30s, 5m, 1h, 2d, 250ms", arguments: [
        ("30s", Duration.seconds(30)),
        ("5m", .seconds(300)),
        ("1h", .seconds(3600)),
        ("2d", .seconds(172_800)),
        ("250ms", .milliseconds(250)),
        ("0s", .zero),
        ("1.5m", .seconds(90)),
        ("10M", .seconds(600)),
        (" 45s ", .seconds(45)),
    ])
    func durationsWithUnits(text: String, expected: Duration) {
        #expect(ValueParsers.duration(text) == expected)
    }

    @Test("plain numbers are seconds: 90, 1.5, 0", arguments: [
        ("90", Duration.seconds(90)),
        ("1.5", .milliseconds(1500)),
        ("0", .zero),
    ])
    func plainSeconds(text: String, expected: Duration) {
        #expect(ValueParsers.duration(text) == expected)
    }

    @Test("invalid durations are rejected: 5x, -1s, empty, units only, +5s, inf", arguments: [
        "5x", "-1s", "-5", "", "   ", "s", "ms", "+5s", "abc", "5 minutes", "inf", "nan", "1e400s",
    ])
    func invalidDurations(text: String) {
        #expect(ValueParsers.duration(text) == nil)
    }

    // MARK: Sizes

    @Test("sizes in powers of 1024: 512KB, 64MB, 1GB, K/M/G, KiB, B", arguments: [
        ("512KB", 524_288),
        ("64MB", 67_108_864),
        ("1GB", 1_073_741_824),
        ("1KiB", 1024),
        ("2MiB", 2_097_152),
        ("4K", 4096),
        ("1M", 1_048_576),
        ("1G", 1_073_741_824),
        ("100B", 100),
        ("1.5KB", 1536),
        ("512kb", 524_288),
        ("512 KB", 524_288),
    ])
    func sizesWithUnits(text: String, expected: Int) {
        #expect(ValueParsers.size(text) == expected)
    }

    @Test("plain numbers are bytes: 100, 0")
    func plainBytes() {
        #expect(ValueParsers.size("100") == 100)
        #expect(ValueParsers.size("0") == 0)
    }

    @Test("invalid sizes are rejected: 5x, -1MB, -1, empty, MB", arguments: ["5x", "-1MB", "-1", "", "MB", "12.5", "lots"])
    func invalidSizes(text: String) {
        #expect(ValueParsers.size(text) == nil)
    }

    // MARK: Out-of-range values
    // These run in a child process (exit tests): an overflow trap must fail the test, not the run.

    @Test("a size too large for Int (100000000000GB) is rejected, not a crash")
    func hugeSizeRejected() async {
        await #expect(processExitsWith: .success) {
            precondition(ValueParsers.size("100000000000GB") == nil, "expected nil")
        }
    }

    @Test("a duration too large for Duration (1e20s) is rejected, not a crash")
    func hugeDurationRejected() async {
        await #expect(processExitsWith: .success) {
            precondition(ValueParsers.duration("1e20s") == nil, "expected nil")
        }
    }

    @Test("a plain-seconds duration too large (1e16) is rejected, not a crash")
    func hugePlainDurationRejected() async {
        await #expect(processExitsWith: .success) {
            precondition(ValueParsers.duration("1e16") == nil, "expected nil")
        }
    }

    // MARK: Environment expansion

    @Test("${VAR} is replaced by the variable's value")
    func expandSimple() throws {
        let env = ["SIGN_SECRET": "s3cret", "HOST": "example.com"]
        #expect(try ValueParsers.expandEnvironment("${SIGN_SECRET}", environment: env) == "s3cret")
        #expect(try ValueParsers.expandEnvironment("https://${HOST}/api", environment: env) == "https://example.com/api")
        #expect(try ValueParsers.expandEnvironment("${HOST}${HOST}", environment: env) == "example.comexample.com")
    }

    @Test("text without '$' is returned unchanged")
    func noDollar() throws {
        #expect(try ValueParsers.expandEnvironment("plain text {x}", environment: [:]) == "plain text {x}")
    }

    @Test("${VAR:-default} uses the default when the variable is unset or empty")
    func expandDefault() throws {
        #expect(try ValueParsers.expandEnvironment("${MISSING:-fallback}", environment: [:]) == "fallback")
        #expect(try ValueParsers.expandEnvironment("${EMPTY:-fallback}", environment: ["EMPTY": ""]) == "fallback")
        #expect(try ValueParsers.expandEnvironment("${SET:-fallback}", environment: ["SET": "value"]) == "value")
        #expect(try ValueParsers.expandEnvironment("${MISSING:-}", environment: [:]) == "")
    }

    @Test("a set but empty variable without a default expands to empty")
    func emptyWithoutDefault() throws {
        #expect(try ValueParsers.expandEnvironment("a${EMPTY}b", environment: ["EMPTY": ""]) == "ab")
    }

    @Test("an undefined variable without a default is an error naming it")
    func undefined() {
        #expect(throws: ValueParsers.ExpansionError.undefined("NOPE")) {
            try ValueParsers.expandEnvironment("x-${NOPE}", environment: [:])
        }
    }

    @Test("an unterminated ${ is an error")
    func unterminated() {
        #expect(throws: ValueParsers.ExpansionError.unterminated) {
            try ValueParsers.expandEnvironment("${OOPS", environment: ["OOPS": "1"])
        }
    }

    @Test("'$$' is a literal '$' and a lone '$' is kept")
    func literalDollar() throws {
        #expect(try ValueParsers.expandEnvironment("cost: $$5", environment: [:]) == "cost: $5")
        #expect(try ValueParsers.expandEnvironment("$$${A}", environment: ["A": "x"]) == "$x")
        #expect(try ValueParsers.expandEnvironment("a$b", environment: [:]) == "a$b")
        #expect(try ValueParsers.expandEnvironment("end$", environment: [:]) == "end$")
    }
}
